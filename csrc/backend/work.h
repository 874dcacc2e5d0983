// The Work fastcomm returns for every call.
//
// Contract (as torch documents for Work):
//  - wait(timeout) blocks until the collective is done or `timeout` (the op's
//    or else the group's) passes; it rethrows the collective's error, and on
//    timeout throws DistBackendError naming the op and sequence number.
//    On CUDA it returns once the op is queued and makes the caller's current
//    stream wait for it (NCCL's work and fastcomm's kernels around it), as
//    ProcessGroupNCCL's wait() does; synchronize() does only that, and
//    isCompleted() is true once the device has run the works underneath.
//  - getFuture() completes with the output tensors (a list), which is what
//    DDP's reducer and torch's comm hooks read. For ops that finished inside
//    launch() (Launched::finished) it is made on first request. For CPU p2p
//    ops, whose delegated works have no future, a future is made on first
//    request and completed by a helper thread that waits for the work
//    (bounded by the group timeout); CUDA p2p ops return NCCL's own future,
//    and their wait() is NCCL's (the caller's timeout only, as above).
//    Shared-memory p2p ops have a driver: wait() and isCompleted() move the
//    op on the calling thread (Launched::driver), and the driver makes the
//    future on first request.
//  - getSequencenumber() is the group-wide sequence number of the call.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "algorithms/algorithm.h"

namespace fastcomm {

class FastcommWork final : public c10d::Work {
 public:
  FastcommWork(int rank, c10d::OpType type, const char* op_name, uint64_t sequence_number,
               std::chrono::milliseconds timeout, Launched launched, std::vector<at::Tensor> results);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override;

 private:
  // Signalled by the future's completion callback; shared so the callback may
  // outlive this Work. Made only for a future not completed at construction.
  struct Completion {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
  };

  // `timeout`: how long to wait for the future; `callers_timeout`: what the
  // caller passed (kNoTimeout when nothing), for NCCL's works.
  bool wait_future(std::chrono::milliseconds timeout, std::chrono::milliseconds callers_timeout);
  bool wait_works(std::chrono::milliseconds timeout, std::chrono::milliseconds callers_timeout);
  bool on_cuda() const;  // the op's tensors are CUDA tensors (its works are NCCL's)
  [[noreturn]] void throw_timeout(std::chrono::milliseconds timeout) const;

  const char* op_name_;
  uint64_t sequence_number_;
  std::chrono::milliseconds timeout_;
  Launched launched_;
  std::vector<at::Tensor> results_;
  std::shared_ptr<Completion> completion_;
  // Guards making a future on request (finished ops, p2p) and, for p2p (no
  // future from the delegate), waiting the work once.
  std::mutex future_mutex_;
  bool p2p_waited_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> p2p_future_;
};

}  // namespace fastcomm
