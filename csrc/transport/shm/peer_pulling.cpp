#include "transport/shm/peer_pulling.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>

#include "transport/shm/cpu_binding.h"

namespace fastcomm::shm {

namespace {

int current_tid() {
  thread_local const int tid = static_cast<int>(::syscall(SYS_gettid));
  return tid;
}

int64_t own_involuntary_switches() {
  struct rusage usage;
  return ::getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_nivcsw : -1;
}

// Thread `tid` of process `pid`'s; -1 when it cannot be read (gone, not pid's).
int64_t involuntary_switches(int pid, int tid) {
  if (pid <= 0 || tid <= 0) return -1;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
  FILE* file = std::fopen(path, "r");
  if (!file) return -1;
  char line[256];
  long long count = -1;
  while (std::fgets(line, sizeof(line), file)) {
    if (std::sscanf(line, "nonvoluntary_ctxt_switches: %lld", &count) == 1) break;
  }
  std::fclose(file);
  return count;
}

}  // namespace

PeerPulling::PeerPulling(const Segment& segment, int local_rank)
    : segment_(segment), local_rank_(local_rank), switches_seen_(segment.local_size(), -1) {}

bool PeerPulling::moved_by_peer() const {
  return segment_.control(local_rank_)->moving.load(std::memory_order_acquire) != 0;
}

bool PeerPulling::take_moves() {
  RankControl* me = segment_.control(local_rank_);
  const uint32_t moves = me->moves.load(std::memory_order_acquire);
  if (moves == moves_seen_) return false;
  moves_seen_ = moves;
  me->moving.store(0, std::memory_order_relaxed);
  return true;
}

void PeerPulling::end_op() {
  if (!may_pull_) return;
  segment_.control(local_rank_)->ops_ended.store(ops_begun_, std::memory_order_release);
  if (take_moves()) fit_cpu_binding_to_op(op_bytes_, /*reapply=*/true);
}

void PeerPulling::begin_op(uint64_t bytes) {
  RankControl* me = segment_.control(local_rank_);
  op_bytes_ = bytes;
  const OpCpus cpus = fit_cpu_binding_to_op(bytes, take_moves());
  may_pull_ = cpus != OpCpus::Unbound;
  op_runs_free_ = cpus == OpCpus::All;
  pulled_this_op_ = false;
  if (!may_pull_) return;
  if (op_runs_free_) me->free_op_switches.store(own_involuntary_switches(), std::memory_order_relaxed);
  const int tid = current_tid();
  if (me->tid.load(std::memory_order_relaxed) != tid) me->tid.store(tid, std::memory_order_release);
  me->ops_begun.store(++ops_begun_, std::memory_order_release);
}

void PeerPulling::before_sleep(uint64_t target) {
  if (!may_pull_ || pulled_this_op_) return;
  checks_left_ = kPullChecks;
  for (int r = 0; r < segment_.local_size(); ++r) {
    const RankControl* peer = segment_.control(r);
    switches_seen_[r] =
        r == local_rank_ ? -1 : involuntary_switches(peer->pid, peer->tid.load(std::memory_order_acquire));
  }
  pull_one_preempted(target, /*counts_just_read=*/true);
}

void PeerPulling::after_wake(uint64_t target) {
  if (!armed()) return;
  --checks_left_;
  pull_one_preempted(target, /*counts_just_read=*/false);
}

void PeerPulling::pull_one_preempted(uint64_t target, bool counts_just_read) {
  const int cpu = ::sched_getcpu();
  for (int r = 0; r < segment_.local_size(); ++r) {
    RankControl* peer = segment_.control(r);
    // Not this rank, not one that has posted, not one whose last post was on this CPU (it gets the CPU when this rank
    // sleeps).
    if (r == local_rank_ || peer->posted.load(std::memory_order_acquire) >= target ||
        peer->cpu.load(std::memory_order_relaxed) == cpu) {
      continue;
    }
    // Only a peer inside an op (this one, or the previous one's last wait): one between ops is
    // computing (DDP's backward between buckets), and moving it put two ranks' work on one CPU.
    if (peer->ops_ended.load(std::memory_order_acquire) >= peer->ops_begun.load(std::memory_order_acquire)) continue;
    const int tid = peer->tid.load(std::memory_order_acquire);
    // Right after before_sleep() read them, the counts are not read again (only the free op's test can hold).
    const int64_t now = counts_just_read ? switches_seen_[r] : involuntary_switches(peer->pid, tid);
    const bool preempted =
        now >= 0 && ((switches_seen_[r] >= 0 && now > switches_seen_[r]) ||
                     (op_runs_free_ && now > peer->free_op_switches.load(std::memory_order_relaxed)));
    if (!preempted) continue;
    const cpu_set_t set = cpu_set_of({cpu});
    peer->moving.store(1, std::memory_order_release);
    if (::sched_setaffinity(tid, sizeof(set), &set) != 0) {  // refused: another user's process
      peer->moving.store(0, std::memory_order_relaxed);
      continue;
    }
    peer->moves.fetch_add(1,
                          std::memory_order_release);  // after the move: the peer sets its CPUs again when its op ends
    pulled_this_op_ = true;
    ++pulls_;
    return;
  }
}

}  // namespace fastcomm::shm
