#include "transport/shm/cpu_binding.h"

#include <sched.h>

#include <atomic>

namespace fastcomm::shm {

namespace {

// Written by set_cpu_binding() only, while no op runs; g_generation (release
// there, acquire per op) publishes g_binding. 0: no binding.
CpuBinding g_binding;
std::atomic<uint64_t> g_generation{0};
uint64_t g_calls = 0;

// What this thread last set, for which set_cpu_binding() call. A new thread
// inherits its creator's CPU set, whichever it was then: unknown until its
// first op.
thread_local OpCpus t_cpus = OpCpus::Unbound;
thread_local uint64_t t_generation = 0;

}  // namespace

void set_cpu_binding(const CpuBinding& binding) {
  g_binding = binding;
  ++g_calls;
  g_generation.store(binding.home_cpu < 0 ? 0 : g_calls, std::memory_order_release);
}

OpCpus fit_cpu_binding_to_op(uint64_t bytes, bool reapply) {
  const uint64_t generation = g_generation.load(std::memory_order_acquire);
  if (generation == 0) return OpCpus::Unbound;
  const bool all = g_binding.unbound_min_bytes > 0 && bytes >= static_cast<uint64_t>(g_binding.unbound_min_bytes);
  const OpCpus wanted = all ? OpCpus::All : OpCpus::Home;
  if (!reapply && t_generation == generation && t_cpus == wanted) return wanted;
  const cpu_set_t set = cpu_set_of(all ? g_binding.cpus : std::vector<int>{g_binding.home_cpu});
  if (::sched_setaffinity(0, sizeof(set), &set) == 0) {
    t_cpus = wanted;
    t_generation = generation;
  }
  return wanted;
}

cpu_set_t cpu_set_of(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus) CPU_SET(cpu, &set);
  return set;
}

}  // namespace fastcomm::shm
