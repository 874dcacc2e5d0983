#include "algorithms/call_check.h"

#include "core/errors.h"
#include "transport/shm/engine.h"

namespace fastcomm {

namespace {

using c10d::OpType;

// A sparse tensor counts as its dense shape (its number of stored values differs between ranks).
int64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    total += t.is_sparse() ? t.numel() * static_cast<int64_t>(t.element_size()) : static_cast<int64_t>(t.nbytes());
  }
  return total;
}

int64_t bytes_of(const std::vector<std::vector<at::Tensor>>& lists) {
  int64_t total = 0;
  for (const auto& list : lists) total += bytes_of(list);
  return total;
}

// What every rank must agree on. Sizes that may differ between ranks of one
// correct call are left out: a gather's outputs and a scatter's inputs exist
// on the root only; all_to_all may be uneven.
shm::OpDescriptor describe_call(const Collective& c, const char* algorithm) {
  shm::OpDescriptor d{};
  d.type = static_cast<int8_t>(c.type);
  const at::ScalarType dtype = c.dtype();
  d.dtype = dtype == at::ScalarType::Undefined ? -1 : static_cast<int16_t>(dtype);
  d.reduce_op = c.is_reduction() ? static_cast<int8_t>(c.reduce_op.op_) : -1;
  const bool rooted =
      c.type == OpType::BROADCAST || c.type == OpType::REDUCE || c.type == OpType::GATHER || c.type == OpType::SCATTER;
  d.root = rooted ? static_cast<int16_t>(c.peer) : -1;
  d.algorithm = shm::protocol_code(algorithm);
  const bool uneven = c.type == OpType::ALLTOALL || (c.type == OpType::ALLTOALL_BASE &&
                                                     !(c.input_splits.empty() && c.output_splits.empty()));
  if (!uneven) {
    d.input_bytes = c.type == OpType::SCATTER ? 0 : bytes_of(c.inputs) + bytes_of(c.input_lists);
    d.output_bytes = c.type == OpType::GATHER ? 0 : bytes_of(c.outputs) + bytes_of(c.output_lists);
  }
  return d;
}

constexpr int kFields = 8;

at::Tensor encode(const shm::OpDescriptor& d) {
  return at::tensor({static_cast<int64_t>(d.type), static_cast<int64_t>(d.dtype), static_cast<int64_t>(d.reduce_op),
                     static_cast<int64_t>(d.root), static_cast<int64_t>(d.algorithm),
                     static_cast<int64_t>(d.input_bytes), static_cast<int64_t>(d.output_bytes), int64_t{0}},
                    at::kLong);
}

shm::OpDescriptor decode(const at::Tensor& t) {
  const auto* v = t.data_ptr<int64_t>();
  shm::OpDescriptor d{};
  d.type = static_cast<int8_t>(v[0]);
  d.dtype = static_cast<int16_t>(v[1]);
  d.reduce_op = static_cast<int8_t>(v[2]);
  d.root = static_cast<int16_t>(v[3]);
  d.algorithm = static_cast<uint16_t>(v[4]);
  d.input_bytes = static_cast<uint64_t>(v[5]);
  d.output_bytes = static_cast<uint64_t>(v[6]);
  return d;
}

// Completes `future` as `inner` completes (its results, or its error).
void forward(Launched& inner, const std::vector<at::Tensor>& results,
             const c10::intrusive_ptr<c10::ivalue::Future>& future) {
  if (inner.finished) {
    if (inner.error) {
      future->setError(inner.error);
    } else {
      future->markCompleted(c10::IValue(results));
    }
    return;
  }
  TORCH_INTERNAL_ASSERT(inner.future, "fastcomm: a checked call must have a future");
  inner.future->addCallback([future](c10::ivalue::Future& done) {
    if (done.hasError()) {
      future->setError(done.exception_ptr());
    } else {
      future->markCompleted(done.value());
    }
  });
}

}  // namespace

Launched CallCheck::run(const Collective& call, const char* algorithm, std::function<Launched()> start) {
  const shm::OpDescriptor mine = describe_call(call, algorithm);
  std::vector<at::Tensor> inputs{encode(mine)};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < check_->getSize(); ++r) outputs[0].push_back(at::empty({kFields}, at::kLong));
  c10d::AllgatherOptions options;
  options.timeout = call.timeout;
  c10::intrusive_ptr<c10d::Work> work = check_->allgather(outputs, inputs, options);
  Launched out = pending();
  out.works.push_back(work);
  const int rank = check_->getRank();
  work->getFuture()->addCallback([future = out.future, mine, inputs, outputs, rank, name = call.name,
                                  results = call.result_tensors(),
                                  start = std::move(start)](c10::ivalue::Future& done) {
    try {
      done.value();  // rethrows the check's own failure (timeout, dead peer)
      for (int r = 0; r < static_cast<int>(outputs[0].size()); ++r) {
        if (at::equal(outputs[0][r], inputs[0])) continue;
        // Every rank holds every descriptor, so every rank raises here.
        FC_CHECK(false, name, "ranks disagree on the collective: rank ", rank, " called ", shm::describe(mine),
                 ", rank ", r, " called ", shm::describe(decode(outputs[0][r])));
      }
      Launched inner = start();
      forward(inner, results, future);
    } catch (...) {
      future->setError(std::current_exception());
    }
  });
  return out;
}

}  // namespace fastcomm
