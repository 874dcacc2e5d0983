// call_check: the ranks compare each call before Gloo runs it.
//
// Gloo matches collectives by position: the k-th call on one rank meets the
// k-th call on every other, whatever each called. Calls that move the same
// bytes but mean different things (an all_reduce that fastcomm runs as an
// all_gather on one rank against an all_gather_into_tensor on another, two
// dtypes of one size, SUM against MAX) return garbage; calls of different
// sizes make Gloo abort the process. So before a CPU collective goes to Gloo,
// every rank all-gathers a fixed-size descriptor of its call (op, dtype,
// reduce op, root, sizes, the algorithm that runs it) on a Gloo group of its
// own, `check`, and starts the collective only once every rank's descriptor
// matches; otherwise the call fails on every rank with "ranks disagree on the
// collective", and the data group never sees it (it stays usable). Every
// descriptor has the same size, so a check never meets a message of another
// size.
//
// Order: `check` runs one thread, so checks complete in issue order, and each
// starts its collective on the data group from that thread when it completes:
// the data group sees the calls in issue order on every rank. Each descriptor
// carries the call's index among this group's calls, refused ones included
// (skip()): a rank that refused a call on its own, while its peers run it,
// disagrees with them from its next call on instead of pairing up with them.
//
// all_to_all: the ranks' sizes may differ by design (uneven splits), so each
// rank sends, inside the check, what it sends to and expects from every peer
// (groups up to kMaxPairedRanks), and every rank verifies that the pairs match.
//
// Cost: one round of a small all_gather before each checked call (latency,
// not bandwidth). A call whose whole data fits in the check's block
// (kInlineBytes: the small all_reduce of allreduce_via_allgather) travels
// inside it and costs no round of its own. FASTCOMM_SHM=0 with
// benchmarks/allreduce_vs_gloo.py measures both against Gloo.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "algorithms/algorithm.h"

namespace fastcomm {

class CallCheck {
 public:
  // `check`: a Gloo group of the same ranks, one thread, used for nothing else
  // (but monitored_barrier, whose tags must follow the checks' order).
  explicit CallCheck(c10::intrusive_ptr<c10d::Backend> check) : check_(std::move(check)) {}

  // Compares `call` (this rank's, run by the algorithm whose
  // shm::protocol_code is `algorithm`) across the ranks; once every rank's
  // matches, runs `start` on the check group's thread and completes the
  // returned future as start's result completes. Never blocks.
  Launched run(const Collective& call, uint16_t algorithm, std::function<Launched()> start);

  // The bytes a call may carry inside its check's block.
  static constexpr int64_t kInlineBytes = 4096;

  // As run, for a call whose data (`payload`, bytes, at most kInlineBytes)
  // travels in the check itself: once every rank's descriptor matches, runs
  // `finish` with every rank's payload (in rank order) on the check group's
  // thread, and the call is done.
  Launched run_inline(const Collective& call, uint16_t algorithm, const at::Tensor& payload,
                      std::function<void(const std::vector<at::Tensor>&)> finish);

  // A call this rank refused before its check (a bad argument on this rank
  // only): counted, so that the next call's index tells the ranks apart.
  void skip() {
    calls_.fetch_add(1, std::memory_order_relaxed);
  }

  // The largest group whose all_to_all has its pairs compared (two int64 per
  // peer in kInlineBytes); larger groups compare its op and dtype, and the
  // sizes of an evenly split all_to_all_single.
  static constexpr int kMaxPairedRanks = 256;

  // The group was shut down or aborted: checks still in flight fail instead
  // of starting their calls.
  void close() {
    closed_->store(true, std::memory_order_release);
  }

 private:
  Launched exchange(const Collective& call, uint16_t algorithm, const at::Tensor& payload,
                    std::function<Launched(const std::vector<at::Tensor>&)> next);

  c10::intrusive_ptr<c10d::Backend> check_;
  std::atomic<uint64_t> calls_{0};  // calls issued (checked or refused) on this rank
  // Shared with the checks in flight, which must not hold the CallCheck: the
  // last reference to the check group dropped on that group's own thread
  // would make it join itself.
  std::shared_ptr<std::atomic<bool>> closed_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace fastcomm
