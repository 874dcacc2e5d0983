#include "backend/process_group_fastcomm.h"

#include <algorithm>

#include "algorithms/delegated.h"
#include "algorithms/registry.h"
#include "backend/validation.h"
#include "backend/work.h"
#include "core/errors.h"

namespace fastcomm {

namespace {

using c10d::OpType;

c10::DeviceType device_of(const Collective& c) {
  const at::Tensor* t = c.first_defined();
  return t ? t->device().type() : c10::DeviceType::CPU;  // barrier: synchronises through the CPU delegate
}

Collective make(OpType type, const char* name) {
  Collective c;
  c.type = type;
  c.name = name;
  return c;
}

}  // namespace

ProcessGroupFastcomm::ProcessGroupFastcomm(int rank, int size, std::chrono::milliseconds timeout, Config config,
                                           Transports transports)
    : c10d::Backend(rank, size),
      timeout_ms_(timeout.count()),
      config_(std::move(config)),
      transports_(std::move(transports)) {
  TORCH_CHECK(transports_.gloo, "fastcomm: the CPU delegate (Gloo) is required");
  TORCH_CHECK(size == 1 || transports_.check, "fastcomm: a group of ", size, " ranks needs its call check (Gloo)");
  TORCH_CHECK(config_.host_of_rank.empty() || static_cast<int>(config_.host_of_rank.size()) == size,
              "fastcomm: the host plan names the host of ", config_.host_of_rank.size(), " ranks, the group has ",
              size);
  // Set before any op runs; it only times waits, so ranks may differ.
  if (transports_.engine) transports_.engine->set_follows_spin_budget(config_.shm_spin_budget);
  // Each algorithm's accepts() holds its whole gate (topology included), so
  // the order below only ranks algorithms that are all correct: adapters
  // first (each rewrites into simpler collectives), then fastcomm's own
  // transports, the delegates last. Only the algorithms this group's topology
  // can run are registered, so algorithm_names() tells which paths it has.
  // The low-precision all_reduce comes first: it is the only collective with
  // a wire format, which no later algorithm looks at (on arena tensors from
  // shm_low_precision_arena_min_bytes on in place, ordinary ones from single
  // copy's minimum on by cross-memory attach, else through the segment).
  const ShmTopology topology{transports_.engine, size, rank, config_.host_of_rank, transports_.failures};
  // Point-to-point through shared memory comes before everything: it moves
  // bytes of any dtype, so no adapter has work for it, and a small message's
  // launch then asks one algorithm, not twenty (benchmarks/peers/patterns.py
  // pingpong: its launch is on every transfer's critical path).
  if (topology.single_host() && size > 1) {
    p2p_ = std::make_shared<shm::P2pChannels>(transports_.engine, static_cast<size_t>(config_.p2p_single_copy_bytes),
                                              static_cast<size_t>(config_.shm_huge_pages_min_bytes));
    dispatcher_.add(make_p2p_shm(topology, p2p_));
  }
  if (topology.single_host()) {
    arena_ = std::make_shared<shm::Arena>();
    dispatcher_.add(make_allreduce_low_precision_shm_arena(topology, arena_, config_.shm_low_precision_arena_min_bytes,
                                                           config_.shm_async_min_bytes));
    dispatcher_.add(make_allreduce_low_precision_shm_single_copy(topology, config_.shm_allreduce_single_copy_min_bytes,
                                                                 config_.shm_huge_pages_min_bytes,
                                                                 config_.shm_async_min_bytes));
    dispatcher_.add(make_allreduce_low_precision_shm(topology, config_.shm_async_min_bytes));
  }
  dispatcher_.add(make_allreduce_low_precision_via_compress());  // takes every other wire collective
  dispatcher_.add(make_contiguous_staging());
  dispatcher_.add(make_alias_staging(rank));
  dispatcher_.add(make_coalesced_via_flat_buffer(size));
  dispatcher_.add(make_alltoall_list_via_single());
  dispatcher_.add(make_avg_via_sum(rank, size));
  dispatcher_.add(make_int16_via_int32());
  dispatcher_.add(make_reinterpret_dtype());
  if (topology.single_host()) {
    // Single copy first (ordinary tensors of its range, where it beats
    // one-shot), the arena's in-place all_reduce for arena tensors from
    // shm_arena_min_bytes (where it beats one-shot; benchmarks/peers/run.py and
    // benchmarks/arena_vs_ordinary.py measure both); where
    // the kernel refuses single copy, below its range, or below the arena's
    // minimum, one-shot, whose one round wins for small messages.
    dispatcher_.add(make_allreduce_shm_single_copy(topology, arena_, config_.shm_allreduce_single_copy_min_bytes,
                                                   config_.shm_allreduce_single_copy_max_bytes,
                                                   config_.shm_huge_pages_min_bytes, config_.shm_async_min_bytes));
    dispatcher_.add(
        make_allreduce_shm_arena(topology, arena_, config_.shm_arena_min_bytes, config_.shm_async_min_bytes));
    dispatcher_.add(make_allreduce_shm_oneshot(topology, config_.shm_oneshot_max_bytes));
    dispatcher_.add(make_allreduce_shm_twoshot(topology, config_.shm_async_min_bytes));
    dispatcher_.add(make_broadcast_shm(topology));
    dispatcher_.add(make_reduce_shm(topology));
    dispatcher_.add(make_allgather_shm_arena(topology, arena_));
    dispatcher_.add(make_allgather_shm(topology));
    dispatcher_.add(make_reduce_scatter_shm_arena(topology, arena_));
    dispatcher_.add(make_reduce_scatter_shm(topology));
    dispatcher_.add(make_alltoall_shm(topology));
    dispatcher_.add(make_barrier_shm(topology));
  }
  if (topology.hierarchical()) {
    const int64_t max_piece = config_.pipeline_piece_bytes;
    dispatcher_.add(make_allreduce_hierarchical(topology, transports_.leaders, max_piece));
    dispatcher_.add(make_broadcast_hierarchical(topology, transports_.leaders));
    dispatcher_.add(make_allgather_hierarchical(topology, transports_.leaders, max_piece));
    dispatcher_.add(make_reduce_scatter_hierarchical(topology, transports_.leaders, max_piece));
    dispatcher_.add(make_reduce_hierarchical(topology, transports_.leaders, max_piece));
    dispatcher_.add(make_gather_hierarchical(topology, transports_.leaders, max_piece));
    dispatcher_.add(make_scatter_hierarchical(topology, transports_.leaders, max_piece));
    dispatcher_.add(make_alltoall_hierarchical(topology, transports_.leaders));
    dispatcher_.add(make_barrier_hierarchical(topology, transports_.leaders));
  }
  // Collectives that reach Gloo are compared across the ranks first (call_check.h).
  if (transports_.check) call_check_ = std::make_shared<CallCheck>(transports_.check);
  if (call_check_) {
    dispatcher_.add(
        make_allreduce_via_allgather(size, config_.allreduce_allgather_max_bytes, transports_.gloo, call_check_));
  }
  dispatcher_.add(make_delegated("gloo_fallback", c10::DeviceType::CPU, transports_.gloo, call_check_));
  if (transports_.nccl) dispatcher_.add(make_delegated("nccl", c10::DeviceType::CUDA, transports_.nccl, nullptr));
  init();
}

bool ProcessGroupFastcomm::supportsTensorAlloc(c10::DeviceIndex device_index) {
  return arena_ != nullptr && device_index < 0;  // CPU (index -1) on a group that has an arena
}

at::Tensor ProcessGroupFastcomm::allocateTensor(long size, at::TensorOptions options) {
  FC_CHECK(arena_, "allocate_tensor",
           "this group has no shared-memory arena (its ranks are not all on one host, or the engine is off)");
  FC_CHECK(!options.has_device() || options.device().is_cpu(), "allocate_tensor", "arena tensors are CPU tensors, got ",
           options.device());
  FC_CHECK(size >= 0, "allocate_tensor", "size must be non-negative, got ", size);
  options = options.device(c10::kCPU);
  const size_t bytes = static_cast<size_t>(size) * c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  std::shared_ptr<shm::Arena::Block> block = arena_->allocate(bytes);
  void* data = block->base;
  // The tensor holds the block: when the tensor (and every view) is gone it goes back to the
  // arena (idle, for the next allocation) or, with the group gone, is unmapped.
  return at::from_blob(
      data, {size},
      [block, arena = std::weak_ptr<shm::Arena>(arena_)](void*) mutable {
        if (auto owner = arena.lock()) owner->release(std::move(block));
        block.reset();
      },
      options);
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupFastcomm::getBackendOptions() {
  return c10::make_intrusive<Options>("fastcomm", timeout());
}

void ProcessGroupFastcomm::count_refused_call() {
  if (transports_.engine) transports_.engine->skip_op();
  if (call_check_) call_check_->skip();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::run(Collective c, std::chrono::milliseconds op_timeout) {
  if (!coalescing_.is_mine()) return run_call(std::move(c), op_timeout, false);
  try {
    return run_call(std::move(c), op_timeout, true);
  } catch (const std::exception& e) {
    coalescing_.abandon(e.what());  // torch's manager will not close the block its body raised in
    throw;
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::run_call(Collective c, std::chrono::milliseconds op_timeout,
                                                              bool in_block) {
  // A handle kept past destroy_process_group: the peers' ops would meet nothing (or stale state).
  FC_CHECK(!closed_.load(std::memory_order_acquire), c.name, "this group was ", closed_how_,
           " on this rank (a handle used after destroy_process_group?); make a new group");
  c.device = device_of(c);
  FC_CHECK(c.device == c10::DeviceType::CPU || c.device == c10::DeviceType::CUDA, c.name, "tensors on ",
           c10::DeviceTypeName(c.device), " are not supported (CPU and CUDA only)");
  FC_CHECK(c.device != c10::DeviceType::CUDA || transports_.nccl, c.name,
           "CUDA tensors need NCCL: ", config_.cuda_unavailable_reason);
  bool to_nccl_block = false;
  try {
    validate(c, rank_, size_);
    if (in_block) {
      to_nccl_block =
          coalescing_.joins_nccl_block(c, c.device == c10::DeviceType::CUDA ? dispatcher_.chosen_name(c) : "");
    }
  } catch (...) {
    // Only CPU calls meet the engine or the call check; NCCL's calls are not compared.
    if (!c.is_p2p() && c.device == c10::DeviceType::CPU) count_refused_call();
    throw;
  }
  c.timeout = op_timeout == c10d::kUnsetTimeout ? timeout() : op_timeout;
  // P2P calls are counted apart (as NCCL does): ranks issue different numbers
  // of them, and the group-wide number must agree across ranks.
  const uint64_t seq = c.is_p2p() ? ++p2p_sequence_number_ : ++sequence_number_;
  if (to_nccl_block) return coalescing_.call_nccl(c);
  Launched launched = dispatcher_.launch(c);
  if (c.device == c10::DeviceType::CUDA && !c.is_p2p()) remember_cuda_works(launched.works);
  auto work =
      c10::make_intrusive<FastcommWork>(rank_, c.type, c.name, seq, c.timeout, std::move(launched), c.result_tensors());
  if (in_block) coalescing_.add_work(c, work);
  return work;
}

void ProcessGroupFastcomm::startCoalescing() {
  coalescing_.start();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::endCoalescing() {
  Coalescing::Ended ended = coalescing_.end(rank_);
  if (ended.nccl_block) remember_cuda_works({ended.nccl_block});
  return ended.work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::broadcast(std::vector<at::Tensor>& tensors,
                                                               const c10d::BroadcastOptions& opts) {
  auto c = make(OpType::BROADCAST, "broadcast");
  c.inputs = tensors;
  c.peer = opts.rootRank;
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::allreduce(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  auto c = make(OpType::ALLREDUCE, "all_reduce");
  c.inputs = tensors;
  c.reduce_op = opts.reduceOp;
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::allreduce_low_precision(const at::Tensor& tensor,
                                                                             LowPrecisionWire wire) {
  auto c = make(OpType::ALLREDUCE, "all_reduce_low_precision");
  c.inputs = {tensor};
  c.wire = std::move(wire);
  return run(std::move(c), c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                         const c10d::AllreduceCoalescedOptions& opts) {
  auto c = make(OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced");
  c.inputs = tensors;
  c.reduce_op = opts.reduceOp;
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::reduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::ReduceOptions& opts) {
  auto c = make(OpType::REDUCE, "reduce");
  c.inputs = tensors;
  c.reduce_op = opts.reduceOp;
  c.peer = opts.rootRank;
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::AllgatherOptions& opts) {
  auto c = make(OpType::ALLGATHER, "all_gather");
  c.inputs = inputs;
  c.output_lists = outputs;
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::AllgatherOptions& opts) {
  auto c = make(OpType::_ALLGATHER_BASE, "all_gather_into_tensor");
  c.inputs = {input};
  c.outputs = {output};
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  auto c = make(OpType::ALLGATHER_COALESCED, "all_gather_into_tensor_coalesced");
  c.inputs = inputs;
  c.outputs = outputs;
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  auto c = make(OpType::ALLGATHER_COALESCED, "all_gather_coalesced");
  c.inputs = inputs;
  c.output_lists = output_lists;
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::GatherOptions& opts) {
  auto c = make(OpType::GATHER, "gather");
  c.inputs = inputs;
  c.output_lists = outputs;
  c.peer = opts.rootRank;
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ScatterOptions& opts) {
  auto c = make(OpType::SCATTER, "scatter");
  c.outputs = outputs;
  c.input_lists = inputs;
  c.peer = opts.rootRank;
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                                    const c10d::ReduceScatterOptions& opts) {
  auto c = make(OpType::REDUCE_SCATTER, "reduce_scatter");
  c.outputs = outputs;
  c.input_lists = inputs;
  c.reduce_op = opts.reduceOp;
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                          const c10d::ReduceScatterOptions& opts) {
  auto c = make(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor");
  c.inputs = {input};
  c.outputs = {output};
  c.reduce_op = opts.reduceOp;
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  auto c = make(kReduceScatterTensorCoalesced, "reduce_scatter_tensor_coalesced");
  c.inputs = inputs;
  c.outputs = outputs;
  c.reduce_op = opts.reduceOp;
  return run_with_options(std::move(c), opts);
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
  return run_with_options(std::move(c), opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::alltoall(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::AllToAllOptions& opts) {
  auto c = make(OpType::ALLTOALL, "all_to_all");
  c.inputs = inputs;
  c.outputs = outputs;
  return run_with_options(std::move(c), opts);
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

void ProcessGroupFastcomm::remember_cuda_works(const std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
  std::lock_guard<std::mutex> lock(cuda_works_mutex_);
  // isCompleted() on NCCL's works queries their CUDA events: no host wait. A
  // work whose query fails is kept: barrier()'s wait raises its error.
  auto done = [](const c10::intrusive_ptr<c10d::Work>& w) {
    try {
      return w->isCompleted();
    } catch (const std::exception&) {
      return false;
    }
  };
  cuda_works_.erase(std::remove_if(cuda_works_.begin(), cuda_works_.end(), done), cuda_works_.end());
  cuda_works_.insert(cuda_works_.end(), works.begin(), works.end());
}

void ProcessGroupFastcomm::wait_for_cuda_works(std::chrono::milliseconds timeout) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  {
    std::lock_guard<std::mutex> lock(cuda_works_mutex_);
    works.swap(cuda_works_);
  }
  // Given a timeout, NCCL's wait() blocks the host until the device has run
  // the work (and raises NCCL's error, or at its timeout). All of them share
  // `timeout`.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& w : works) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    w->wait(std::max(left, std::chrono::milliseconds(1)));
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFastcomm::barrier(const c10d::BarrierOptions& opts) {
  // As ProcessGroupNCCL's barrier (an all_reduce queued behind the
  // collectives before it, waited for on the host), it returns once the CUDA
  // collectives this rank queued before it have run (NCCL's part of them;
  // fastcomm's kernels after NCCL are ordered by their works' wait()). Only
  // collectives: every rank makes them, so every rank's wait ends, while a
  // send may wait for a receive its peer posts only after the barrier. Each
  // rank waits for its own before it meets the others, so no rank needs to
  // know what its peers queued; the barrier itself runs on CPU.
  wait_for_cuda_works(opts.timeout == c10d::kUnsetTimeout ? timeout() : opts.timeout);
  return run_with_options(make(OpType::BARRIER, "barrier"), opts);
}

void ProcessGroupFastcomm::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  c10d::BarrierOptions o = opts;
  if (o.timeout == c10d::kUnsetTimeout) o.timeout = timeout();
  // On the check group where there is one: Gloo's monitored barrier takes its tags on the calling
  // thread, and on the data group they would interleave with the checked calls' (taken on the
  // check group's thread) in a different order on each rank.
  (transports_.check ? transports_.check : transports_.gloo)->monitoredBarrier(o, wait_all_ranks);
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
  transports_.gloo->setTimeout(timeout);  // Gloo's own waits (its context timeout) follow too
}

void ProcessGroupFastcomm::abort() {
  closed_how_ = "aborted";
  closed_.store(true, std::memory_order_release);
  if (call_check_) call_check_->close();
  if (transports_.check) transports_.check->abort();
  if (transports_.engine) transports_.engine->leave();  // local peers waiting for this rank stop now
  if (p2p_) p2p_->close(c10::str("rank ", rank_, " aborted the group"));
  transports_.gloo->abort();
  if (transports_.nccl) transports_.nccl->abort();
}

void ProcessGroupFastcomm::shutdown() {
  if (!closed_.load(std::memory_order_relaxed)) closed_how_ = "shut down";
  closed_.store(true, std::memory_order_release);
  if (call_check_) call_check_->close();
  if (transports_.check) transports_.check->shutdown();
  if (transports_.engine) transports_.engine->leave();  // local peers waiting for this rank stop now
  if (p2p_) p2p_->close(c10::str("rank ", rank_, " shut the group down"));
  transports_.gloo->shutdown();
  if (transports_.nccl) transports_.nccl->shutdown();
}

}  // namespace fastcomm
