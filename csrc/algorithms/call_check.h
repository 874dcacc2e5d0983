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
// the data group sees the calls in issue order on every rank.
//
// Cost: one round of a 64-byte all_gather before each checked call (latency,
// not bandwidth): benchmarks/small_messages.py measures it.
#pragma once

#include <functional>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "algorithms/algorithm.h"

namespace fastcomm {

class CallCheck {
 public:
  // `check`: a Gloo group of the same ranks, one thread, used for nothing else.
  explicit CallCheck(c10::intrusive_ptr<c10d::Backend> check) : check_(std::move(check)) {}

  // Compares `call` (this rank's, run by `algorithm`) across the ranks; once
  // every rank's matches, runs `start` on the check group's thread and
  // completes the returned future as start's result completes. Never blocks.
  Launched run(const Collective& call, const char* algorithm, std::function<Launched()> start);

 private:
  c10::intrusive_ptr<c10d::Backend> check_;
};

}  // namespace fastcomm
