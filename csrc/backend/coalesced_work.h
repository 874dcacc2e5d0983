// The Work of a coalescing block (torch's _coalescing_manager, through which
// dist.batch_isend_irecv runs): one Work for every call made between the
// group's startCoalescing() and endCoalescing().
//
// Contract (ProcessGroupNCCL's for the same block):
//  - its parts are the block's CPU calls' own works, in call order, and, where
//    the block held CUDA calls, NCCL's work for its own block (which covers
//    them all; the CUDA calls themselves return no work);
//  - wait(timeout) waits the parts in order, each at most `timeout` (the
//    group's where none is given), and rethrows the first error it meets
//    (the parts after it are not waited);
//    synchronize() and isCompleted() follow every part; getFuture() completes
//    once every part's future has, with their results in call order.
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
