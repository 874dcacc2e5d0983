// Pulling a preempted peer onto the waiter's CPU (bound processes only:
// FASTCOMM_SHM_BIND_CPUS, cpu_binding.h).
//
// A rank that a busy process preempted waits on its CPU's run queue until the
// busy one's time slice ends (up to a 4 ms tick at HZ=250), even while its
// waiting peer's CPU idles: the kernel's balancer leaves alone a task that ran
// within the last half millisecond (sched_migration_cost). A scheduler trace
// of 2 ranks beside a busy-loop process shows it: a large all_reduce takes
// several times as long whenever that happens, and round medians flip between
// the two. A waiter about to sleep can see that a
// peer it waits for was preempted (the peer thread's involuntary context
// switches grew: since the waiter began to sleep, or since a free op began,
// whose count the peer publishes) and moves it onto its own CPU
// (sched_setaffinity of the peer's thread: the kernel moves a queued task at
// once). Only a peer inside an op is moved (begun, not ended: this op, or
// the last wait of the previous one): one between ops is computing (DDP's
// backward between buckets), and moving it puts two ranks' work on one CPU
// (benchmarks/ddp_training.py --short measures the step). The moved rank takes
// its own CPU set back when the op ends (the `moves` count of its RankControl,
// read by the thread that ran the op). Measured by benchmarks/peers/run.py
// --background-load 1 (docs/algorithms.md "Where ranks run").
//
// At most one pull per op (the waiter's CPU runs one thread at a time); the
// waiter looks every kPullCheckSlice for the first kPullChecks of a sleep,
// then sleeps as any waiter. The peer must be the same user's (or the kernel
// refuses: nothing happens). The thread id is read from the peer's
// /proc/<pid>/task/<tid> right before the move, so a thread that ended is not
// touched (a pid reused within those microseconds is the one window left).
//
// Thread-safety: used by the engine's op, under its op mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "transport/shm/segment.h"

namespace fastcomm::shm {

constexpr auto kPullCheckSlice = std::chrono::microseconds(250);  // against the ~4 ms the peer would wait
constexpr int kPullChecks = 8;

class PeerPulling {
 public:
  PeerPulling(const Segment& segment, int local_rank);

  // At an op's start, on the thread that runs it: takes this thread's CPU set
  // back if a peer moved it, fits it to the op's size (cpu_binding.h), and
  // publishes what peers need to pull this thread. At its end: takes the CPU
  // set back if a peer moved the thread during the op (so the caller's work
  // after the op does not share the peer's CPU).
  void begin_op(uint64_t bytes);
  void end_op();

  // True while this op may still pull a peer (sleep in kPullCheckSlice steps).
  bool armed() const {
    return may_pull_ && !pulled_this_op_ && checks_left_ > 0;
  }
  // Before the first sleep of a wait for round `target`, and after each wake.
  void before_sleep(uint64_t target);
  void after_wake(uint64_t target);

  // Peers this rank moved onto its CPU so far, and whether a peer is moving or
  // moved this rank's thread since its latest op began (tests and introspection).
  uint64_t pulls() const {
    return pulls_;
  }
  bool moved_by_peer() const;

 private:
  void pull_one_preempted(uint64_t target, bool counts_just_read);
  bool take_moves();  // true (once) when a peer moved this rank's thread since the last call

  const Segment& segment_;
  int local_rank_;
  bool may_pull_ = false;      // the process is bound
  bool op_runs_free_ = false;  // this op runs on every CPU (peers published their counts at its start)
  bool pulled_this_op_ = false;
  int checks_left_ = 0;
  std::vector<int64_t> switches_seen_;  // per local rank, when this rank began to sleep (-1: unknown)
  uint32_t moves_seen_ = 0;             // this rank's RankControl::moves when it last took its CPU set back
  uint64_t ops_begun_ = 0;              // ops of this group this rank began while bound
  uint64_t op_bytes_ = 0;               // the current op's (for end_op)
  uint64_t pulls_ = 0;
};

}  // namespace fastcomm::shm
