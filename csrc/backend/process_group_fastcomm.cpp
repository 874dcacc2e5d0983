#include "backend/process_group_fastcomm.h"

#include "algorithms/delegated.h"
#include "algorithms/registry.h"
#include "backend/validation.h"
#include "backend/work.h"
#include "common/errors.h"

namespace fastcomm {

namespace {

using c10d::OpType;

c10::DeviceType device_of(const Collective& c) {
  for (const auto& t : c.all_tensors()) {
    if (t.defined()) return t.device().type();
  }
  return c10::DeviceType::CPU;  // barrier: synchronises through the CPU delegate
}

Collective make(OpType type, const char* name) {
  Collective c;
  c.type = type;
  c.name = name;
  return c;
}

}  // namespace

ProcessGroupFastcomm::ProcessGroupFastcomm(
    c10::intrusive_ptr<c10d::Store> store,
    int rank,
    int size,
    std::chrono::milliseconds timeout,
    c10::intrusive_ptr<c10d::Backend> gloo,
    c10::intrusive_ptr<c10d::Backend> nccl,
    std::string cuda_unavailable_reason,
    int64_t allreduce_allgather_max_bytes,
    ShmSetup shm)
    : c10d::Backend(rank, size),
      store_(std::move(store)),
      timeout_ms_(timeout.count()),
      gloo_(std::move(gloo)),
      nccl_(std::move(nccl)),
      cuda_unavailable_reason_(std::move(cuda_unavailable_reason)),
      shm_(std::move(shm)) {
  TORCH_CHECK(gloo_, "fastcomm: the CPU delegate (Gloo) is required");
  // Adapters first (each rewrites into simpler collectives), transports last.
  dispatcher_.add(make_contiguous_staging());
  dispatcher_.add(make_coalesced_via_flat_buffer(size));
  dispatcher_.add(make_alltoall_list_via_single());
  dispatcher_.add(make_avg_via_sum(rank, size));
  dispatcher_.add(make_int16_via_int32());
  dispatcher_.add(make_reinterpret_dtype());
  TORCH_CHECK(!shm_.hierarchical || static_cast<int>(shm_.host_of_rank.size()) == size,
              "fastcomm: a hierarchical group needs the host of each of its ", size, " ranks, got ",
              shm_.host_of_rank.size());
  const ShmTopology topology{shm_.engine, size, rank, shm_.host_of_rank};
  if (topology.single_host()) {
    dispatcher_.add(make_allreduce_shm_oneshot(topology, shm_.oneshot_max_bytes));
    dispatcher_.add(make_allreduce_shm_twoshot(topology));
    dispatcher_.add(make_broadcast_shm(topology));
    dispatcher_.add(make_reduce_shm(topology));
    dispatcher_.add(make_allgather_shm(topology));
    dispatcher_.add(make_reduce_scatter_shm(topology));
    dispatcher_.add(make_alltoall_shm(topology));
    dispatcher_.add(make_barrier_shm(topology));
  } else if (shm_.hierarchical) {
    dispatcher_.add(make_allreduce_hierarchical(topology, shm_.leaders));
    dispatcher_.add(make_broadcast_hierarchical(topology, shm_.leaders));
  }
  dispatcher_.add(make_allreduce_via_allgather(size, allreduce_allgather_max_bytes));
  dispatcher_.add(make_delegated("gloo_fallback", c10::DeviceType::CPU, gloo_));
  if (nccl_) dispatcher_.add(make_delegated("nccl", c10::DeviceType::CUDA, nccl_));
  init();
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupFastcomm::getBackendOptions() {
  return c10::make_intrusive<Options>("fastcomm", timeout());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::run(Collective c, std::chrono::milliseconds op_timeout) {
  c.device = device_of(c);
  FC_CHECK(c.device == c10::DeviceType::CPU || c.device == c10::DeviceType::CUDA, c.name,
           "tensors on ", c10::DeviceTypeName(c.device), " are not supported (CPU and CUDA only)");
  FC_CHECK(c.device != c10::DeviceType::CUDA || nccl_, c.name, "CUDA tensors need NCCL: ", cuda_unavailable_reason_);
  validate(c, rank_, size_);
  c.timeout = op_timeout == c10d::kUnsetTimeout ? timeout() : op_timeout;
  // P2P calls are counted apart (as NCCL does): ranks issue different numbers
  // of them, and the group-wide number must agree across ranks.
  const uint64_t seq = c.is_p2p() ? ++p2p_sequence_number_ : ++sequence_number_;
  Launched launched = dispatcher_.launch(c);
  return c10::make_intrusive<FastcommWork>(rank_, c.type, c.name, seq, c.timeout, std::move(launched),
                                           c.result_tensors());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::broadcast(std::vector<at::Tensor>& tensors,
                                                               const c10d::BroadcastOptions& opts) {
  auto c = make(OpType::BROADCAST, "broadcast");
  c.inputs = tensors;
  c.peer = opts.rootRank;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::allreduce(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  auto c = make(OpType::ALLREDUCE, "all_reduce");
  c.inputs = tensors;
  c.reduce_op = opts.reduceOp;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  auto c = make(OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced");
  c.inputs = tensors;
  c.reduce_op = opts.reduceOp;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::reduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::ReduceOptions& opts) {
  auto c = make(OpType::REDUCE, "reduce");
  c.inputs = tensors;
  c.reduce_op = opts.reduceOp;
  c.peer = opts.rootRank;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::AllgatherOptions& opts) {
  auto c = make(OpType::ALLGATHER, "all_gather");
  c.inputs = inputs;
  c.output_lists = outputs;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::AllgatherOptions& opts) {
  auto c = make(OpType::_ALLGATHER_BASE, "all_gather_into_tensor");
  c.inputs = {input};
  c.outputs = {output};
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  auto c = make(OpType::ALLGATHER_COALESCED, "all_gather_into_tensor_coalesced");
  c.inputs = inputs;
  c.outputs = outputs;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  auto c = make(OpType::ALLGATHER_COALESCED, "all_gather_coalesced");
  c.inputs = inputs;
  c.output_lists = output_lists;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::GatherOptions& opts) {
  auto c = make(OpType::GATHER, "gather");
  c.inputs = inputs;
  c.output_lists = outputs;
  c.peer = opts.rootRank;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ScatterOptions& opts) {
  auto c = make(OpType::SCATTER, "scatter");
  c.outputs = outputs;
  c.input_lists = inputs;
  c.peer = opts.rootRank;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                                    const c10d::ReduceScatterOptions& opts) {
  auto c = make(OpType::REDUCE_SCATTER, "reduce_scatter");
  c.outputs = outputs;
  c.input_lists = inputs;
  c.reduce_op = opts.reduceOp;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                          const c10d::ReduceScatterOptions& opts) {
  auto c = make(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor");
  c.inputs = {input};
  c.outputs = {output};
  c.reduce_op = opts.reduceOp;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  auto c = make(OpType::REDUCE_SCATTER_TENSOR_COALESCED, "reduce_scatter_tensor_coalesced");
  c.inputs = inputs;
  c.outputs = outputs;
  c.reduce_op = opts.reduceOp;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                   std::vector<int64_t>& output_splits,
                                                                   std::vector<int64_t>& input_splits,
                                                                   const c10d::AllToAllOptions& opts) {
  auto c = make(OpType::ALLTOALL_BASE, "all_to_all_single");
  c.inputs = {input};
  c.outputs = {output};
  c.input_splits = input_splits;
  c.output_splits = output_splits;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::alltoall(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::AllToAllOptions& opts) {
  auto c = make(OpType::ALLTOALL, "all_to_all");
  c.inputs = inputs;
  c.outputs = outputs;
  return run(std::move(c), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  auto c = make(OpType::SEND, "send");
  c.inputs = tensors;
  c.peer = dst;
  c.tag = tag;
  return run(std::move(c), c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  auto c = make(OpType::RECV, "recv");
  c.inputs = tensors;
  c.peer = src;
  c.tag = tag;
  return run(std::move(c), c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  auto c = make(OpType::RECVANYSOURCE, "recv");
  c.inputs = tensors;
  c.tag = tag;
  return run(std::move(c), c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::barrier(const c10d::BarrierOptions& opts) {
  return run(make(OpType::BARRIER, "barrier"), opts.timeout);
}

void ProcessGroupFastcomm::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  c10d::BarrierOptions o = opts;
  if (o.timeout == c10d::kUnsetTimeout) o.timeout = timeout();
  gloo_->monitoredBarrier(o, wait_all_ranks);
}

void ProcessGroupFastcomm::setSequenceNumberForGroup() {
  // Every rank starts at 0 and counts the same calls, so no exchange is needed.
  sequence_number_ = 0;
}

uint64_t ProcessGroupFastcomm::getSequenceNumberForGroup() {
  return sequence_number_;
}

void ProcessGroupFastcomm::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ms_ = timeout.count();
  gloo_->setTimeout(timeout);  // Gloo's own waits (its context timeout) follow too
}

void ProcessGroupFastcomm::abort() {
  gloo_->abort();
  if (nccl_) nccl_->abort();
}

void ProcessGroupFastcomm::shutdown() {
  gloo_->shutdown();
  if (nccl_) nccl_->shutdown();
}

}  // namespace fastcomm
