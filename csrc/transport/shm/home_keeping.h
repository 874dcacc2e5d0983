// Keeping ranks that outnumber their CPUs on their home CPUs while nothing
// else runs (FASTCOMM_SHM_BIND_CPUS=auto where a host's ranks outnumber the
// CPUs they may use; fastcomm/_options.py resolve_cpu_placement).
//
// 4 ranks on 2 CPUs are fastest two to a CPU, local ranks {0, 2} and {1, 3}
// (the arrangement binding makes). Unbound, the scheduler places them at
// start-up and at wake-ups and leaves them there: a job with three on one CPU
// and one alone is markedly slower, and every job keeps the arrangement it
// started with (the scheduler migrates a rank only a few times per job), so
// round medians split in two.
// Binding fixes it but costs a time slice per op beside a busy process (a
// bound rank cannot leave a CPU that process wants). So the rank is not
// bound: at an op's start, when its thread is not on its home CPU (local rank
// mod the CPUs) and the host was quiet over the last load window (the CPUs'
// busy time less the local ranks' own CPU time under kQuietForeignShare of
// their capacity), the thread moves itself home (sched_setaffinity to the home
// CPU, then straight back to the CPU set it had) and the scheduler is free
// again. Beside another busy process nothing moves: there the scheduler's
// placement is the one to keep. At most kMaxReturnsPerSecond returns, so a
// scheduler that keeps disagreeing is not fought.
//
// While the host is quiet such ranks also spin before they yield (the engine's
// wait_all), as ranks with a CPU each do: a spinning waiter yields at once when
// a rank it waits for last posted from its own CPU, and with every rank kept at
// home that CPU is where the rank still is. Measured by benchmarks/peers/run.py
// --nproc 4 --libraries fastcomm with FASTCOMM_SHM_BIND_CPUS=0 as the variant
// (docs/algorithms.md "Where ranks run").
//
// Thread-safety: set_home_cpu() is called while no op runs (group set-up, a
// forked child); a HomeKeeping is used by its engine's op, under the op mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "transport/shm/segment.h"

namespace fastcomm::shm {

constexpr auto kLoadWindow = std::chrono::milliseconds(250);  // /proc/stat counts in 10 ms ticks
constexpr double kQuietForeignShare = 0.15;
constexpr int kMaxReturnsPerSecond = 5;

// The process's home CPU and every CPU it may use (home_cpu < 0: keep nothing).
void set_home_cpu(int home_cpu, std::vector<int> cpus);

class HomeKeeping {
 public:
  // `peers_visible`: the local ranks' pids are this process's to read (one pid
  // namespace); without them a quiet host cannot be told, and nothing is kept.
  HomeKeeping(const Segment& segment, bool peers_visible) : segment_(segment), peers_visible_(peers_visible) {}

  // At an op's start, on the thread that runs it; `now`: about the current time.
  void begin_op(std::chrono::steady_clock::time_point now);

  // Times this rank's op thread moved itself home, and the share of the CPUs'
  // capacity that processes other than the local ranks used over the last load
  // window (< 0: not measured yet, or not measurable). Tests and introspection.
  uint64_t returns() const {
    return returns_;
  }
  // Whether the last load window found the host quiet (false: not measured, or busy).
  bool host_quiet() const {
    return foreign_load_ >= 0 && foreign_load_ < kQuietForeignShare;
  }
  double foreign_load() const {
    return foreign_load_;
  }

 private:
  void sample_load(std::chrono::steady_clock::time_point now);

  const Segment& segment_;
  bool peers_visible_;
  uint64_t generation_seen_ = 0;  // of set_home_cpu(): a new call restarts the load samples
  std::chrono::steady_clock::time_point next_sample_{};
  std::chrono::steady_clock::time_point last_sample_{};
  int64_t last_busy_ticks_ = -1;   // the CPUs' busy time at the last sample (-1: none)
  int64_t last_ranks_ticks_ = -1;  // the local ranks' CPU time then
  double foreign_load_ = -1.0;
  std::chrono::steady_clock::time_point returns_window_{};
  int returns_in_window_ = 0;
  uint64_t returns_ = 0;
};

}  // namespace fastcomm::shm
