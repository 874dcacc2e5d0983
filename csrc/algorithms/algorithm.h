// The algorithm seam of the backend.
//
// The backend turns each call into a Collective and hands it to the Dispatcher,
// which asks its algorithms in order and launches the first one that accepts.
// An algorithm either does the work itself or rewrites the collective into
// simpler ones and launches those through the dispatcher (e.g. AVG = SUM then a
// divide); a rewrite must produce collectives it no longer accepts itself.
//
// Contract of launch(): it must not block on peers. It returns a Launched whose
// future completes (with Collective::result_tensors()) once the outputs are
// final, or with the error that stopped it. An op that ran to its end inside
// launch() (the shared-memory ones) returns `finished` instead, and no future:
// one is made only when someone asks (future_of), which most callers of a
// microsecond-scale small op never do. P2P ops have no future: a delegate's
// `works` are waited directly; shared-memory p2p has a `driver` work whose
// wait() moves the op on the caller's thread and whose getFuture() makes the
// future on request.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "core/collective.h"

namespace fastcomm {

struct Launched {
  c10::intrusive_ptr<c10::ivalue::Future> future;        // null for finished ops and p2p
  bool finished = false;           // ran to its end inside launch(): outputs final, or `error`
  std::exception_ptr error;        // a finished op's failure (null: it succeeded)
  std::vector<c10::intrusive_ptr<c10d::Work>> works;      // what runs underneath, for abort()
  // Set by ops that progress on the waiting thread (shm p2p): the Work's
  // wait(), isCompleted() and getFuture() call it (its future holds the op's
  // results: no adapter sits above such an op).
  c10::intrusive_ptr<c10d::Work> driver;
  // Set by ops that fail their own future at their deadline (shm ops on the
  // engine's op queue): a wait() without a timeout of its own gives them a
  // moment past the op's timeout, so the caller sees their error (which says
  // whom they waited for) rather than a generic timeout.
  bool self_timed = false;
};

class Dispatcher;

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // Stable, descriptive name (e.g. "avg_via_sum"); shown by algorithm_counts().
  virtual const char* name() const = 0;
  // True when this algorithm can run `c` (device, op, dtype, size, layout).
  virtual bool accepts(const Collective& c) const = 0;
  virtual Launched launch(Collective& c, Dispatcher& dispatcher) = 0;
};

// A future for `results` that completes once every future in `parts` has, after
// running `step` (if any) on the thread that completed the last part. The first
// error among the parts (or thrown by `step`) becomes the future's error. When
// every part finished inside launch(), `step` runs now and the result is
// finished too (no future made).
Launched then_run(std::vector<Launched> parts, std::function<void()> step, std::vector<at::Tensor> results);

// A future for `results` completed by a helper thread that waits for `work`
// (at most `timeout`); for delegate works that have no future of their own.
c10::intrusive_ptr<c10::ivalue::Future> future_by_waiting(c10::intrusive_ptr<c10d::Work> work,
                                                          std::vector<at::Tensor> results,
                                                          std::chrono::milliseconds timeout);

// A future not completed yet (of a tensor list); whoever runs the op completes it.
Launched pending();

// An op that ran to its end inside launch(): succeeded, or failed with `error`.
Launched finished();
Launched failed(std::exception_ptr error);

// A future of a tensor list already completed with `results`.
c10::intrusive_ptr<c10::ivalue::Future> completed_future(std::vector<at::Tensor> results);

// `launched`'s future; for a finished op one made now (completed with
// `results`, or failed) and kept in `launched`. Null for delegated p2p.
c10::intrusive_ptr<c10::ivalue::Future> future_of(Launched& launched, const std::vector<at::Tensor>& results);

}  // namespace fastcomm
