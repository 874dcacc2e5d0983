// ProcessGroupFastcomm: the c10d::Backend registered as "fastcomm".
//
// Per call it validates the arguments (validation.h), describes the call as a
// Collective, lets the Dispatcher pick an algorithm by device/op/dtype/layout,
// and returns a FastcommWork. It owns the delegates it falls back to: an
// internal Gloo backend for CPU tensors and, when torch has NCCL and a GPU, an
// NCCL backend for CUDA tensors; both are made in Python (fastcomm/_backend.py)
// over prefixes of this group's store and passed in.
//
// Thread-safety: collectives must be issued in the same order on every rank,
// as for any c10d backend; the counters are atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "algorithms/dispatcher.h"
#include "backend/collective.h"
#include "transport/shm/engine.h"

namespace fastcomm {

// The shared-memory engine of this rank's host and how to use it; made by the
// rendezvous in fastcomm/_shm.py. An empty ShmSetup means Gloo for everything.
struct ShmSetup {
  std::shared_ptr<shm::Engine> engine;         // null: no engine on this rank
  bool hierarchical = false;                   // the group spans hosts, and every host is ready
  c10::intrusive_ptr<c10d::Backend> leaders;   // Gloo among host leaders (leaders only, hierarchical only)
  int64_t oneshot_max_bytes = 0;               // all_reduce one-shot / two-shot threshold
  std::vector<int> host_of_rank;               // host index of every group rank (hierarchical only)
};

class ProcessGroupFastcomm final : public c10d::Backend {
 public:
  ProcessGroupFastcomm(
      c10::intrusive_ptr<c10d::Store> store,
      int rank,
      int size,
      std::chrono::milliseconds timeout,
      c10::intrusive_ptr<c10d::Backend> gloo,
      c10::intrusive_ptr<c10d::Backend> nccl,
      std::string cuda_unavailable_reason,
      int64_t allreduce_allgather_max_bytes,
      ShmSetup shm);

  const std::string getBackendName() const override {
    return "fastcomm";
  }
  c10::intrusive_ptr<Options> getBackendOptions() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
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
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
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
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Gloo's: reports which ranks failed to reach the barrier in time.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void abort() override;
  void shutdown() override;

  // Introspection for tests and benchmarks.
  const Dispatcher& dispatcher() const {
    return dispatcher_;
  }
  const std::shared_ptr<shm::Engine>& shm_engine() const {
    return shm_.engine;
  }
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeout_ms_.load());
  }

 private:
  // Validates `c`, stamps device and timeout, launches it, wraps it in a Work.
  c10::intrusive_ptr<c10d::Work> run(Collective c, std::chrono::milliseconds op_timeout);

  c10::intrusive_ptr<c10d::Store> store_;  // this group's store: for rendezvous of engines of fastcomm's own
  std::atomic<int64_t> timeout_ms_;  // the group timeout; setTimeout may change it from another thread
  c10::intrusive_ptr<c10d::Backend> gloo_;
  c10::intrusive_ptr<c10d::Backend> nccl_;
  std::string cuda_unavailable_reason_;
  ShmSetup shm_;
  Dispatcher dispatcher_;
  std::atomic<uint64_t> sequence_number_{0};      // collectives
  std::atomic<uint64_t> p2p_sequence_number_{0};  // send/recv
};

}  // namespace fastcomm
