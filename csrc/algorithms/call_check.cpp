#include "algorithms/call_check.h"

#include <algorithm>
#include <thread>

#include "algorithms/shm_common.h"
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

bool is_alltoall(const Collective& c) {
  return c.type == OpType::ALLTOALL || c.type == OpType::ALLTOALL_BASE;
}

// all_to_all_single whose splits are empty or all dim0 / world_size on both sides.
bool evenly_split(const Collective& c, int world_size) {
  auto even = [world_size](const std::vector<int64_t>& splits, const at::Tensor& t) {
    const int64_t rows = t.dim() > 0 ? t.size(0) / world_size : 0;
    return std::all_of(splits.begin(), splits.end(), [rows](int64_t s) { return s == rows; });
  };
  return c.type == OpType::ALLTOALL_BASE && even(c.input_splits, c.inputs[0]) && even(c.output_splits, c.outputs[0]);
}

// all_to_all whose per-peer sizes travel in the check (alltoall_pairs) instead of its descriptor.
bool paired(const Collective& c, int world_size) {
  return is_alltoall(c) && world_size <= CallCheck::kMaxPairedRanks;
}

// What every rank must agree on. Sizes that may differ between ranks of one
// correct call are left out: a gather's outputs and a scatter's inputs exist
// on the root only; all_to_all's may differ (uneven splits, or one rank even
// and another not), and its pairs are compared instead (alltoall_pairs); in
// groups too large for the pairs, only an evenly split all_to_all_single's
// sizes are compared.
shm::OpDescriptor describe_call(const Collective& c, uint16_t algorithm, int world_size) {
  shm::OpDescriptor d{};
  d.type = static_cast<int8_t>(c.type);
  const at::ScalarType dtype = c.dtype();
  d.dtype = dtype == at::ScalarType::Undefined ? -1 : static_cast<int16_t>(dtype);
  d.reduce_op = c.is_reduction() ? static_cast<int8_t>(c.reduce_op.op_) : -1;
  const bool rooted =
      c.type == OpType::BROADCAST || c.type == OpType::REDUCE || c.type == OpType::GATHER || c.type == OpType::SCATTER;
  d.root = rooted ? static_cast<int16_t>(c.peer) : -1;
  d.algorithm = algorithm;
  const bool sized = !is_alltoall(c) || (!paired(c, world_size) && evenly_split(c, world_size));
  if (sized) {
    d.input_bytes = c.type == OpType::SCATTER ? 0 : bytes_of(c.inputs) + bytes_of(c.input_lists);
    d.output_bytes = c.type == OpType::GATHER ? 0 : bytes_of(c.outputs) + bytes_of(c.output_lists);
  }
  return d;
}

// An all_to_all's bytes to each peer, then from each peer (2n int64), as
// bytes; undefined for other calls and for groups over kMaxPairedRanks.
static_assert(2 * CallCheck::kMaxPairedRanks * sizeof(int64_t) <= CallCheck::kInlineBytes,
              "an all_to_all's pairs travel inside its check");
at::Tensor alltoall_pairs(const Collective& c, int n) {
  if (!paired(c, n)) return at::Tensor();
  at::Tensor pairs = at::empty({2 * n}, at::kLong);
  int64_t* v = pairs.data_ptr<int64_t>();
  if (c.type == OpType::ALLTOALL) {
    for (int q = 0; q < n; ++q) {
      v[q] = static_cast<int64_t>(c.inputs[q].nbytes());
      v[n + q] = static_cast<int64_t>(c.outputs[q].nbytes());
    }
  } else {
    std::vector<uint64_t> offsets(n), lengths(n);
    alltoall_blocks(c.inputs[0], c.input_splits, n, offsets, lengths);
    for (int q = 0; q < n; ++q) v[q] = static_cast<int64_t>(lengths[q]);
    alltoall_blocks(c.outputs[0], c.output_splits, n, offsets, lengths);
    for (int q = 0; q < n; ++q) v[n + q] = static_cast<int64_t>(lengths[q]);
  }
  return pairs.view(at::kByte);
}

// Every rank holds every rank's pairs (alltoall_pairs), so every rank raises
// alike where what rank r sends to rank q is not what q expects from r.
void check_pairs(const char* name, const std::vector<at::Tensor>& payloads, int n) {
  auto pairs_of = [&payloads](int r) { return reinterpret_cast<const int64_t*>(payloads[r].data_ptr<uint8_t>()); };
  for (int r = 0; r < n; ++r) {
    for (int q = 0; q < n; ++q) {
      const int64_t sends = pairs_of(r)[q], expects = pairs_of(q)[n + r];
      FC_CHECK(sends == expects, name, "ranks disagree on the collective: its sizes do not pair up: rank ", r,
               " sends ", sends, " bytes to rank ", q, ", which expects ", expects, " bytes from it");
    }
  }
}

constexpr int kFields = kDescriptorFields + 1;  // int64 header fields: the descriptor, then the call's index
constexpr int64_t kHeaderBytes = kFields * sizeof(int64_t);
constexpr int64_t kBlockBytes = kHeaderBytes + CallCheck::kInlineBytes;

// A rank's block: the descriptor and the call's index among the group's checked
// calls, then `payload` (at most kInlineBytes; the rest zero).
at::Tensor encode(const shm::OpDescriptor& d, uint64_t index, const at::Tensor& payload) {
  at::Tensor block = at::zeros({kBlockBytes}, at::kByte);
  int64_t* v = reinterpret_cast<int64_t*>(block.data_ptr<uint8_t>());
  descriptor_to_fields(d, v);
  v[kDescriptorFields] = static_cast<int64_t>(index);
  if (payload.defined()) block.narrow(0, kHeaderBytes, payload.numel()).copy_(payload);
  return block;
}

const int64_t* header(const at::Tensor& block) {
  return reinterpret_cast<const int64_t*>(block.data_ptr<uint8_t>());
}

shm::OpDescriptor decode(const at::Tensor& block) {
  return descriptor_from_fields(header(block));
}

// Completes `future` off the check group's one thread, on a thread of its own:
// the future's callbacks (a DDP hook's next step: torch's PowerSGD) may issue
// a collective and wait for it, whose check needs the check thread, and any
// pool of threads they could block would run out the same way. Detached: it
// ends once the callbacks return, which a blocked one does by its timeout.
void complete_elsewhere(const c10::intrusive_ptr<c10::ivalue::Future>& future, std::exception_ptr error,
                        std::vector<at::Tensor> results) {
  std::thread([future, error, results = std::move(results)]() {
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(c10::IValue(results));
    }
  }).detach();
}

// Completes `future` as `inner` completes (its results, or its error).
void forward(Launched& inner, const std::vector<at::Tensor>& results,
             const c10::intrusive_ptr<c10::ivalue::Future>& future) {
  if (inner.finished) {
    complete_elsewhere(future, inner.error, results);
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

Launched CallCheck::run(const Collective& call, uint16_t algorithm, std::function<Launched()> start) {
  const int n = check_->getSize();
  at::Tensor pairs = alltoall_pairs(call, n);
  const bool paired = pairs.defined();
  return exchange(call, algorithm, pairs,
                  [start = std::move(start), paired, n, name = call.name](const std::vector<at::Tensor>& payloads) {
                    if (paired) check_pairs(name, payloads, n);
                    return start();
                  });
}

Launched CallCheck::run_inline(const Collective& call, uint16_t algorithm, const at::Tensor& payload,
                               std::function<void(const std::vector<at::Tensor>&)> finish) {
  TORCH_INTERNAL_ASSERT(payload.scalar_type() == at::kByte && payload.dim() == 1 && payload.numel() <= kInlineBytes);
  return exchange(call, algorithm, payload, [finish = std::move(finish)](const std::vector<at::Tensor>& payloads) {
    finish(payloads);
    return finished();
  });
}

Launched CallCheck::exchange(const Collective& call, uint16_t algorithm, const at::Tensor& payload,
                             std::function<Launched(const std::vector<at::Tensor>&)> next) {
  const shm::OpDescriptor mine = describe_call(call, algorithm, check_->getSize());
  std::vector<at::Tensor> inputs{encode(mine, calls_.fetch_add(1, std::memory_order_relaxed), payload)};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < check_->getSize(); ++r) outputs[0].push_back(at::empty({kBlockBytes}, at::kByte));
  c10d::AllgatherOptions options;
  options.timeout = call.timeout;
  c10::intrusive_ptr<c10d::Work> work = check_->allgather(outputs, inputs, options);
  Launched out = pending();
  out.works.push_back(work);
  const int rank = check_->getRank();
  const int64_t payload_bytes = payload.defined() ? payload.numel() : 0;
  // The callback runs on the check group's thread, or here if the check already failed.
  work->getFuture()->addCallback([closed = closed_, future = out.future, mine, inputs, outputs, rank, payload_bytes,
                                  name = call.name, results = call.result_tensors(),
                                  next = std::move(next)](c10::ivalue::Future& done) {
    try {
      done.value();  // rethrows the check's own failure (timeout, dead peer)
      const at::Tensor my_header = inputs[0].narrow(0, 0, kHeaderBytes);
      std::vector<at::Tensor> payloads;
      for (int r = 0; r < static_cast<int>(outputs[0].size()); ++r) {
        const at::Tensor& block = outputs[0][r];
        payloads.push_back(block.narrow(0, kHeaderBytes, payload_bytes));
        if (at::equal(block.narrow(0, 0, kHeaderBytes), my_header)) continue;
        // Every rank holds every descriptor, so every rank raises here.
        FC_CHECK(false, name, "ranks disagree on the collective: rank ", rank, " called ", shm::describe(mine),
                 " as its call #", header(inputs[0])[kFields - 1], " through Gloo, rank ", r, " called ",
                 shm::describe(decode(block)), " as its call #", header(block)[kFields - 1]);
      }
      FC_CHECK(!closed->load(std::memory_order_acquire), name, "the group was shut down while the call waited");
      Launched inner = next(payloads);
      forward(inner, results, future);
    } catch (...) {
      complete_elsewhere(future, std::current_exception(), {});
    }
  });
  return out;
}

}  // namespace fastcomm
