#include "backend/coalesced_work.h"

#include <ATen/core/jit_type.h>

namespace fastcomm {

CoalescedWork::CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> parts)
    : c10d::Work(rank, c10d::OpType::COALESCED), parts_(std::move(parts)) {}

bool CoalescedWork::isCompleted() {
  for (auto& part : parts_) {
    if (!part->isCompleted()) return false;
  }
  return true;
}

bool CoalescedWork::isSuccess() const {
  for (const auto& part : parts_) {
    if (!part->isSuccess()) return false;
  }
  return true;
}

std::exception_ptr CoalescedWork::exception() const {
  for (const auto& part : parts_) {
    if (auto error = part->exception()) return error;
  }
  return nullptr;
}

std::vector<at::Tensor> CoalescedWork::result() {
  std::vector<at::Tensor> out;
  for (auto& part : parts_) {
    std::vector<at::Tensor> r = part->result();
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

bool CoalescedWork::wait(std::chrono::milliseconds timeout) {
  for (auto& part : parts_) part->wait(timeout);
  return true;
}

void CoalescedWork::synchronize() {
  for (auto& part : parts_) part->synchronize();
}

void CoalescedWork::abort() {
  for (auto& part : parts_) part->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> CoalescedWork::getFuture() {
  // One part: its own future, with any CUDA events. Several: collectAll,
  // whose future carries no CUDA events, so only CPU parts' futures (which
  // hold none) are combined.
  if (parts_.size() == 1) return parts_[0]->getFuture();
  c10::List<c10::intrusive_ptr<c10::ivalue::Future>> futures(c10::FutureType::create(c10::ListType::ofTensors()));
  for (auto& part : parts_) {
    futures.push_back(part->getFuture());
    TORCH_CHECK(futures.get(futures.size() - 1)->devices().empty(),
                "fastcomm: get_future() of a coalescing block of several CUDA calls that ran apart is not "
                "supported (their CUDA events cannot be combined here); wait() the block's work instead");
  }
  return c10::collectAll(futures)->then(
      [](c10::ivalue::Future& all) -> c10::IValue {
        std::vector<at::Tensor> out;
        for (const auto& done : all.value().toList()) {
          auto f = done.get().toFuture();
          if (f->hasError()) std::rethrow_exception(f->exception_ptr());
          for (const auto& t : f->value().toTensorVector()) out.push_back(t);
        }
        return c10::IValue(out);
      },
      c10::ListType::ofTensors());
}

}  // namespace fastcomm
