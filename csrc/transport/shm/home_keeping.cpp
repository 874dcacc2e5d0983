#include "transport/shm/home_keeping.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "transport/shm/cpu_binding.h"
#include "transport/shm/waiting.h"

namespace fastcomm::shm {

namespace {

// Written by set_home_cpu() only, while no op runs; g_generation (release
// there, acquire per op) publishes them. 0: nothing to keep.
int g_home_cpu = -1;
std::vector<int> g_cpus;
std::atomic<uint64_t> g_generation{0};
uint64_t g_calls = 0;

// Busy time of `cpus` (user, nice, system, irq, softirq: not idle, iowait or
// the hypervisor's steal) from /proc/stat, in clock ticks; -1 if unreadable.
int64_t busy_ticks(const std::vector<int>& cpus) {
  FILE* file = std::fopen("/proc/stat", "r");
  if (!file) return -1;
  char line[512];
  int64_t busy = 0;
  size_t found = 0;
  while (std::fgets(line, sizeof(line), file)) {
    int cpu;
    long long user, nice, system, idle, iowait, irq, softirq;
    if (std::strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9') continue;
    if (std::sscanf(line + 3, "%d %lld %lld %lld %lld %lld %lld %lld", &cpu, &user, &nice, &system, &idle, &iowait,
                    &irq, &softirq) != 8) {
      continue;
    }
    for (const int c : cpus) {
      if (c == cpu) {
        busy += user + nice + system + irq + softirq;
        ++found;
      }
    }
  }
  std::fclose(file);
  return found == cpus.size() ? busy : -1;
}

// CPU time of process `pid`, all its threads (utime + stime), in clock ticks; -1 if unreadable.
int64_t process_ticks(int pid) {
  if (pid <= 0) return -1;
  const std::string rest = proc_stat_after_name(pid);
  // After the name: state ppid pgrp sid tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime.
  long long utime, stime;
  if (std::sscanf(rest.c_str(), " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &utime, &stime) != 2) {
    return -1;
  }
  return utime + stime;
}

}  // namespace

void set_home_cpu(int home_cpu, std::vector<int> cpus) {
  g_home_cpu = home_cpu;
  g_cpus = std::move(cpus);
  ++g_calls;
  g_generation.store(home_cpu < 0 ? 0 : g_calls, std::memory_order_release);
}

void HomeKeeping::sample_load(std::chrono::steady_clock::time_point now) {
  next_sample_ = now + kLoadWindow;
  const int64_t busy = busy_ticks(g_cpus);
  int64_t ranks = 0;
  for (int r = 0; r < segment_.local_size() && ranks >= 0; ++r) {
    const int64_t ticks = process_ticks(segment_.control(r)->pid);
    ranks = ticks < 0 ? -1 : ranks + ticks;
  }
  if (busy >= 0 && ranks >= 0 && last_busy_ticks_ >= 0 && last_ranks_ticks_ >= 0) {
    const double seconds = std::chrono::duration<double>(now - last_sample_).count();
    const double capacity = seconds * static_cast<double>(::sysconf(_SC_CLK_TCK)) * static_cast<double>(g_cpus.size());
    const double foreign = static_cast<double>((busy - last_busy_ticks_) - (ranks - last_ranks_ticks_));
    foreign_load_ = capacity > 0 ? std::max(foreign, 0.0) / capacity : -1.0;
  } else {
    foreign_load_ = -1.0;
  }
  last_sample_ = now;
  last_busy_ticks_ = busy;
  last_ranks_ticks_ = ranks;
}

void HomeKeeping::begin_op(std::chrono::steady_clock::time_point now) {
  const uint64_t generation = g_generation.load(std::memory_order_acquire);
  if (generation == 0 || !peers_visible_) return;  // nothing to keep, or no way to tell a quiet host
  if (generation != generation_seen_) {  // a new setting: earlier samples may be of other CPUs
    generation_seen_ = generation;
    last_busy_ticks_ = last_ranks_ticks_ = -1;
    foreign_load_ = -1.0;
    next_sample_ = now;
  }
  if (now >= next_sample_) sample_load(now);
  if (::sched_getcpu() == g_home_cpu) return;
  if (!host_quiet()) return;
  if (now - returns_window_ >= std::chrono::seconds(1)) {
    returns_window_ = now;
    returns_in_window_ = 0;
  }
  if (returns_in_window_ >= kMaxReturnsPerSecond) return;
  cpu_set_t had;
  if (::sched_getaffinity(0, sizeof(had), &had) != 0 || !CPU_ISSET(g_home_cpu, &had)) return;  // the user's choice
  const cpu_set_t home = cpu_set_of({g_home_cpu});
  // Setting a CPU set without the current CPU moves the thread at once; the
  // second call leaves the scheduler free again (a refused change: nothing moved).
  if (::sched_setaffinity(0, sizeof(home), &home) != 0) return;
  ::sched_setaffinity(0, sizeof(had), &had);
  ++returns_in_window_;
  ++returns_;
}

}  // namespace fastcomm::shm
