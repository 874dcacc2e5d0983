#include "backend/work.h"

#include <ATen/core/jit_type.h>

#include "core/errors.h"

namespace fastcomm {

FastcommWork::FastcommWork(int rank, c10d::OpType type, const char* op_name, uint64_t sequence_number,
                           std::chrono::milliseconds timeout, Launched launched, std::vector<at::Tensor> results)
    : c10d::Work(rank, type),
      op_name_(op_name),
      sequence_number_(sequence_number),
      timeout_(timeout),
      launched_(std::move(launched)),
      results_(std::move(results)) {
  // Shared-memory collectives finish inside launch: no Completion and no
  // callback then (a mutex, a condition variable and two allocations on the
  // microsecond-scale small-message path); a completed future never needs waiting for.
  if (launched_.future && !launched_.future->completed()) {
    completion_ = std::make_shared<Completion>();
    auto completion = completion_;
    launched_.future->addCallback([completion](c10::ivalue::Future&) {
      std::lock_guard<std::mutex> lock(completion->mutex);
      completion->done = true;
      completion->cv.notify_all();
    });
  }
}

bool FastcommWork::isCompleted() {
  if (launched_.finished) return true;
  if (launched_.driver) return launched_.driver->isCompleted();
  if (launched_.future) {
    if (!launched_.future->completed()) return false;
    // A CPU future completes with the op (Gloo completes its own future before
    // its work's flag: asking the works could say false after wait()). A CUDA
    // future completes when the op is queued: the works underneath (NCCL's)
    // say when the device has run it.
    if (launched_.future->devices().empty()) return true;
  }
  for (auto& w : launched_.works) {
    if (!w->isCompleted()) return false;
  }
  return true;
}

bool FastcommWork::isSuccess() const {
  if (launched_.finished) return !launched_.error;
  if (launched_.future) return launched_.future->completed() && !launched_.future->hasError();
  for (const auto& w : launched_.works) {
    if (!w->isSuccess()) return false;
  }
  return true;
}

std::exception_ptr FastcommWork::exception() const {
  if (launched_.finished) return launched_.error;
  if (launched_.future) return launched_.future->hasError() ? launched_.future->exception_ptr() : nullptr;
  for (const auto& w : launched_.works) {
    if (auto e = w->exception()) return e;
  }
  return nullptr;
}

int FastcommWork::sourceRank() const {
  TORCH_CHECK(launched_.works.size() == 1, "fastcomm ", op_name_, ": sourceRank() is only defined for recv");
  return launched_.works[0]->sourceRank();
}

std::vector<at::Tensor> FastcommWork::result() {
  return results_;
}

void FastcommWork::throw_timeout(std::chrono::milliseconds timeout) const {
  FC_THROW_BACKEND_ERROR(op_name_, "timed out after ", timeout.count(), " ms (sequence number ", sequence_number_,
                         "); a peer has not joined this collective or died");
}

bool FastcommWork::wait_future(std::chrono::milliseconds timeout, std::chrono::milliseconds callers_timeout) {
  if (!launched_.future->completed()) {
    std::unique_lock<std::mutex> lock(completion_->mutex);
    if (!completion_->cv.wait_for(lock, timeout, [this] { return completion_->done; })) {
      throw_timeout(timeout);
    }
  }
  // On CUDA, the works underneath are NCCL's: their wait() makes the current
  // stream wait for NCCL and raises NCCL's errors, as a wait on
  // ProcessGroupNCCL's own work would. They get the caller's timeout only:
  // given one, NCCL's wait blocks the host until the device is done.
  // Then, the future being completed, wait() only makes the current streams
  // wait for its CUDA events (those of fastcomm's kernels after NCCL) and
  // records its tensors' use on them. CPU futures hold no events.
  if (!launched_.future->devices().empty()) {
    for (auto& w : launched_.works) w->wait(callers_timeout);
  }
  launched_.future->wait();
  if (launched_.future->hasError()) std::rethrow_exception(launched_.future->exception_ptr());
  return true;
}

bool FastcommWork::on_cuda() const {
  return !results_.empty() && results_[0].is_cuda();
}

bool FastcommWork::wait_works(std::chrono::milliseconds timeout, std::chrono::milliseconds callers_timeout) {
  // NCCL's p2p work: waited as collectives' works are (wait_future), with the
  // caller's timeout only, so without one it orders the current stream and
  // returns; waiting it again orders another stream.
  if (on_cuda()) {
    launched_.works[0]->wait(callers_timeout);
    return true;
  }
  // A delegated p2p work must be waited at most once: a second wait on a Gloo
  // recv waits for a second message.
  std::unique_lock<std::mutex> lock(future_mutex_);
  if (p2p_future_) {
    auto future = p2p_future_;
    lock.unlock();
    future->wait();  // its waiter thread is bounded by the timeout
    if (future->hasError()) std::rethrow_exception(future->exception_ptr());
    return true;
  }
  if (!p2p_waited_) {
    launched_.works[0]->wait(timeout);
    p2p_waited_ = true;
  }
  return true;
}

bool FastcommWork::wait(std::chrono::milliseconds timeout) {
  if (launched_.finished) {  // nothing to wait for, so no limit to work out
    if (launched_.error) std::rethrow_exception(launched_.error);
    return true;
  }
  // The grace is a backstop only: a self-timed op fails at its own deadline.
  constexpr std::chrono::milliseconds kSelfTimedGrace(1000);
  const auto limit = timeout != kNoTimeout ? timeout : launched_.self_timed ? timeout_ + kSelfTimedGrace : timeout_;
  if (launched_.driver) return launched_.driver->wait(limit);
  return launched_.future ? wait_future(limit, timeout) : wait_works(limit, timeout);
}

void FastcommWork::synchronize() {
  for (auto& w : launched_.works) w->synchronize();
  // fastcomm's own kernels after the works (then_run's steps) ran on other
  // streams: the current streams wait for them too. Never blocks the host: a
  // future not yet completed has queued nothing on a device.
  if (launched_.future && launched_.future->completed()) launched_.future->wait();
}

void FastcommWork::abort() {
  for (auto& w : launched_.works) w->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> FastcommWork::getFuture() {
  if (!launched_.finished && launched_.future) return launched_.future;  // set at construction, never changed
  if (launched_.driver) return launched_.driver->getFuture();             // made once, by the driver
  std::lock_guard<std::mutex> lock(future_mutex_);
  if (launched_.finished) return future_of(launched_, results_);  // made on the first request
  if (!p2p_future_) {
    TORCH_INTERNAL_ASSERT(launched_.works.size() == 1, "fastcomm: p2p launches hold exactly one work");
    if (on_cuda()) {
      // NCCL's p2p future: completed with the tensor once the transfer is
      // queued, holding its CUDA events (as for its collectives).
      try {
        p2p_future_ = launched_.works[0]->getFuture();
      } catch (const c10::Error&) {  // a work without one: waited on a helper thread (the host waits)
      }
      if (!p2p_future_) p2p_future_ = future_by_waiting(launched_.works[0], results_, timeout_);
    } else {
      p2p_future_ =
          p2p_waited_ ? completed_future(results_) : future_by_waiting(launched_.works[0], results_, timeout_);
    }
  }
  return p2p_future_;
}

uint64_t FastcommWork::getSequencenumber() const {
  return sequence_number_;
}

}  // namespace fastcomm
