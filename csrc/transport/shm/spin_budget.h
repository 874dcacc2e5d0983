// SpinBudget: how long a waiter on its caller's thread keeps its CPU (first
// pause loops, then sched_yield) before it sleeps on a futex, following the
// waits it saw lately.
//
// Why: a futex sleep costs the waker a system call and the sleeper a wake-up
// of tens of microseconds on a virtual machine, and both land on the critical
// path of the next op. Ranks that arrive apart (a training loop's compute
// before each op) wait up to the skew on every op: a fixed spin of ~100 us
// covers skews of a few tens of microseconds, and every longer wait paid the
// sleep (benchmarks/peers/patterns.py, skew at W = 200 and 1000 us, against
// MPI, which polls without end).
//
// The rule: the budget is 1.5x the longest of the last kRecent waits, at
// least kFloor (what the fixed pause loop covers) and at most kCeiling; where
// one of those waits outlasted kCeiling (a peer computing elsewhere, a
// training step's long gaps) it is kFloor, so waits that spinning would not
// cover cost no more CPU than before. Above the pause loop the waiter calls
// sched_yield, so a runnable neighbour (another job, a dataloader worker, a
// peer rank sharing the CPU) gets the CPU at once: what a neighbour keeps
// beside fastcomm is measured by the same benchmark's --busy 1.
//
// It applies where each of the host's ranks has a CPU (Engine::wait_all), and
// can be turned off (FASTCOMM_SHM_SPIN_BUDGET=0). Only timing follows from it,
// never a result: every rank still waits until every peer has posted.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>

namespace fastcomm::shm {

class SpinBudget {
 public:
  static constexpr std::chrono::nanoseconds kFloor = std::chrono::microseconds(100);
  static constexpr std::chrono::nanoseconds kCeiling = std::chrono::microseconds(2000);
  static constexpr int kRecent = 8;

  // How long the next wait may keep the CPU before it sleeps.
  std::chrono::nanoseconds next() const {
    const int64_t longest = *std::max_element(recent_ns_.begin(), recent_ns_.end());
    if (longest > kCeiling.count()) return kFloor;
    return std::chrono::nanoseconds(std::clamp<int64_t>(longest + longest / 2, kFloor.count(), kCeiling.count()));
  }

  // A wait that lasted `waited` (however it ended).
  void record(std::chrono::nanoseconds waited) {
    recent_ns_[static_cast<size_t>(next_slot_)] = waited.count();
    next_slot_ = (next_slot_ + 1) % kRecent;
  }

 private:
  std::array<int64_t, kRecent> recent_ns_{};
  int next_slot_ = 0;
};

}  // namespace fastcomm::shm
