// ProcessGroupFastcomm: the c10d::Backend registered as "fastcomm".
//
// Per call it validates the arguments (validation.h), describes the call as a
// Collective, lets the Dispatcher pick an algorithm by device/op/dtype/layout,
// and returns a FastcommWork. It owns its Transports: an internal Gloo backend
// for CPU tensors and, when torch has NCCL and a GPU, an NCCL backend for CUDA
// tensors, the host's shared-memory engine and the host leaders' Gloo group.
//
// Thread-safety: collectives must be issued in the same order on every rank,
// as for any c10d backend; the counters are atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "algorithms/call_check.h"
#include "algorithms/dispatcher.h"
#include "backend/coalescing.h"
#include "core/collective.h"
#include "core/config.h"
#include "transport/shm/arena.h"
#include "transport/shm/engine.h"
#include "transport/shm/p2p_channels.h"

namespace fastcomm {

// What the backend moves bytes with; made in Python (fastcomm/_backend.py,
// fastcomm/_shm.py) over prefixes of the group's store and passed in.
struct Transports {
  c10::intrusive_ptr<c10d::Backend> gloo;     // CPU transport and fallback (required)
  c10::intrusive_ptr<c10d::Backend> check;    // Gloo, one thread: the ranks compare calls for `gloo` (2+ ranks)
  c10::intrusive_ptr<c10d::Backend> nccl;     // CUDA tensors; null when CUDA cannot run
  std::shared_ptr<shm::Engine> engine;        // this rank's host segment; null: no engine
  c10::intrusive_ptr<c10d::Backend> leaders;  // Gloo among host leaders (hierarchical groups, leaders only)
  c10::intrusive_ptr<c10d::Store> failures;   // where host leaders post why an op failed (hierarchical groups)
};

class ProcessGroupFastcomm final : public c10d::Backend {
 public:
  ProcessGroupFastcomm(int rank, int size, std::chrono::milliseconds timeout, Config config, Transports transports);

  const std::string getBackendName() const override {
    return "fastcomm";
  }
  c10::intrusive_ptr<Options> getBackendOptions() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  // fastcomm's low-precision all_reduce of `tensor` in place (core/collective.h
  // LowPrecisionWire: scaled, clamped, sent and summed as wire.dtype), for the
  // fp16/bf16 DDP hooks; not a c10d collective, so Python reaches it through
  // fastcomm's binding only.
  c10::intrusive_ptr<c10d::Work> allreduce_low_precision(const at::Tensor& tensor, LowPrecisionWire wire);
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& output_lists,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Coalescing blocks (coalescing.h): every call between startCoalescing()
  // and endCoalescing() completes as endCoalescing()'s one Work. Declared
  // supported where the group has NCCL, so that dist.batch_isend_irecv runs
  // its CUDA sends and receives in one NCCL group, as with NCCL's own backend.
  // CPU-only groups do not declare it: their point-to-point ops never wait for
  // one another, so a batch gains nothing from a block, and torch's manager
  // leaves the group's Python coalescing state behind when its body raises
  // (a later all_reduce on the group would then only be recorded, not run).
  bool supportsCoalescing() const override {
    return transports_.nccl != nullptr;
  }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  // Gloo's: reports which ranks failed to reach the barrier in time.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void abort() override;
  void shutdown() override;

  // Tensors in this rank's shared-memory arena (transport/shm/arena.h), which
  // all_reduce reads in place on the host's other ranks. DDP allocates its
  // buckets here when DDP_DISABLE_COMM_MEM=0. CPU only; groups on one host.
  bool supportsTensorAlloc(c10::DeviceIndex device_index) override;
  at::Tensor allocateTensor(long size, at::TensorOptions options = {}) override;

  // Introspection for tests and benchmarks.
  const Dispatcher& dispatcher() const {
    return dispatcher_;
  }
  const std::shared_ptr<shm::Engine>& shm_engine() const {
    return transports_.engine;
  }
  const Config& config() const {
    return config_;
  }
  const std::shared_ptr<shm::P2pChannels>& p2p() const {
    return p2p_;
  }
  const std::shared_ptr<shm::Arena>& arena() const {
    return arena_;
  }
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeout_ms_.load());
  }

 private:
  // Validates `c`, stamps device and timeout, launches it, wraps it in a Work.
  c10::intrusive_ptr<c10d::Work> run(Collective c, std::chrono::milliseconds op_timeout);
  // run() for a call made with torch's options: their timeout, and their
  // asyncOp as Collective::blocking (the delegates get it back as asyncOp).
  template <typename Options>
  c10::intrusive_ptr<c10d::Work> run_with_options(Collective c, const Options& opts) {
    c.blocking = !opts.asyncOp;
    return run(std::move(c), opts.timeout);
  }
  // run()'s body; `in_block`: the call joins the calling thread's open coalescing block.
  c10::intrusive_ptr<c10d::Work> run_call(Collective c, std::chrono::milliseconds op_timeout, bool in_block);
  // A collective this rank refused on its own still counts as a call (engine
  // and call check), so the ranks disagree on the next one instead of pairing
  // this rank's next call with the peers' refused one.
  void count_refused_call();

  std::atomic<int64_t> timeout_ms_;  // the group timeout; setTimeout may change it from another thread
  const Config config_;
  const Transports transports_;
  Coalescing coalescing_{transports_.nccl};  // the open coalescing block, if any
  std::shared_ptr<shm::P2pChannels> p2p_;  // single-host groups: send/recv through shared memory
  std::shared_ptr<shm::Arena> arena_;      // single-host groups: allocateTensor's memory
  Dispatcher dispatcher_;
  std::atomic<uint64_t> sequence_number_{0};      // collectives
  std::atomic<uint64_t> p2p_sequence_number_{0};  // send/recv
  // Set by shutdown() and abort() (destroy_process_group): later calls raise on this rank, and the
  // engine's leave() makes peers waiting for it raise too. closed_how_ is written before closed_.
  std::atomic<bool> closed_{false};
  const char* closed_how_ = "";
  std::shared_ptr<CallCheck> call_check_;  // the Gloo paths' call check (groups of 2+ ranks)

  // NCCL's works under this rank's CUDA collectives (not point-to-point) that
  // had not run when last looked at: barrier() waits for them. Pruned of
  // completed ones as calls add; a barrier takes them all.
  void remember_cuda_works(const std::vector<c10::intrusive_ptr<c10d::Work>>& works);
  void wait_for_cuda_works(std::chrono::milliseconds timeout);
  std::mutex cuda_works_mutex_;
  std::vector<c10::intrusive_ptr<c10d::Work>> cuda_works_;
};

}  // namespace fastcomm
