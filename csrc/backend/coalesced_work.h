// The Work of a coalescing block (torch's _coalescing_manager, through which
// dist.batch_isend_irecv runs): one Work for every call made between the
// group's startCoalescing() and endCoalescing().
//
// Contract (ProcessGroupNCCL's for the same block):
//  - its parts are the works of the block's calls that ran as they were made,
//    in call order, and, where the block opened NCCL's block, NCCL's work for
//    it (which covers the calls NCCL took; they return no work themselves);
//  - wait(timeout) waits the parts in order, each at most `timeout` (the
//    group's where none is given), and rethrows the first error it meets
//    (the parts after it are not waited);
//    synchronize() and isCompleted() follow every part; getFuture() completes
//    once every part's future has, with their results in call order (one
//    part's future is its own; several CUDA parts have none: wait() them).
#pragma once

#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace fastcomm {

class CoalescedWork final : public c10d::Work {
 public:
  CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> parts);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  const std::vector<c10::intrusive_ptr<c10d::Work>> parts_;
};

}  // namespace fastcomm
