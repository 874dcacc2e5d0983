// How shared-memory waiters wait: pause loops, futexes on words in the
// segment, and whether a peer process still lives. Shared by the engine
// (collectives) and the point-to-point channels.
#pragma once

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>

namespace fastcomm::shm {

// Waiting spins (when ranks do not outnumber cores), then yields, then sleeps.
constexpr int kSpinIterations = 4000;  // ~ tens of microseconds of pause loops
constexpr int kYieldIterations = 64;
constexpr auto kSleepSlice = std::chrono::milliseconds(2);  // futex wait cap: bounds deadline checks
constexpr auto kPidCheckInterval = std::chrono::milliseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// FUTEX_WAIT/WAKE without the PRIVATE flag: the word is shared between processes.
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void futex_wake_all(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// How often a spinning waiter looks whether a rank it waits for runs on its
// own CPU (then spinning only delays that rank: the waiter yields instead).
// Two ranks sharing a core happen often on small machines (the scheduler puts
// a woken task beside its waker), and a waiter that spins there holds the core
// its peer needs for a whole time slice. Measured by benchmarks/peers/run.py
// --libraries fastcomm (docs/algorithms.md "How fastcomm waits").
constexpr int kSharedCpuCheckEvery = 32;

// Process `pid`'s /proc/<pid>/stat after its command name, from the space
// before its state letter ("" when unreadable: gone, or no procfs). The name
// may hold spaces and parentheses, so it ends at the last ')'.
inline std::string proc_stat_after_name(int pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  std::ifstream stat(path);
  std::string line;
  if (!stat || !std::getline(stat, line)) return "";
  const auto paren = line.rfind(')');
  return paren == std::string::npos ? "" : line.substr(paren + 1);
}

// False when the process is gone or a zombie (killed but not yet reaped).
inline bool process_alive(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const std::string rest = proc_stat_after_name(pid);  // "": no procfs, rely on kill()
  return rest.size() < 2 || rest[1] != 'Z';
}

}  // namespace fastcomm::shm
