// Which CPUs a bound rank's op runs on (FASTCOMM_SHM_BIND_CPUS and
// FASTCOMM_SHM_UNBOUND_MIN_BYTES, fastcomm/_options.py).
//
// A rank bound to a CPU of its own never shares a core with its peer, which
// keeps short ops short. A long op (about a time slice: milliseconds) beside a
// busy process is better off free: bound, the rank that the busy process
// preempts waits on its own CPU while its peer's idles, so an op either fits
// between two preemptions or takes several times as long, and medians flip
// from one run to the next; free, the preempted rank can move to the CPU its
// waiting peer left idle (peer_pulling.h moves it there at once). So the
// thread that runs an op of at least `unbound_min_bytes` widens its CPU set to
// every CPU the process had before binding, and the next smaller op binds it
// again: lazily, one sched_setaffinity per change, so a thread that only runs
// large ops (DDP's buckets) changes once. Measured by benchmarks/peers/run.py
// --background-load 1 (docs/algorithms.md "Where ranks run").
//
// Thread-safety: set_cpu_binding() is called while no op runs (group set-up,
// a forked child); fit_cpu_binding_to_op() on any thread that runs an op.
#pragma once

#include <sched.h>

#include <cstdint>
#include <vector>

namespace fastcomm::shm {

struct CpuBinding {
  int home_cpu = -1;              // the CPU the process was bound to; < 0: not bound, nothing to fit
  std::vector<int> cpus;          // every CPU it had before binding
  int64_t unbound_min_bytes = 0;  // ops of at least this many bytes run on `cpus`; 0: every op on home_cpu
};

void set_cpu_binding(const CpuBinding& binding);

enum class OpCpus { Unbound, Home, All };  // the process is not bound / the op runs on home_cpu / on every CPU

// On the thread about to run a shared-memory op of `bytes` (its larger side):
// sets its CPU set to home_cpu or every CPU, as above, and says which;
// `reapply`: set it even if this thread set the same before (a peer changed it
// meanwhile, peer_pulling.h). A refused change (a cgroup took CPUs away) leaves
// the thread's CPU set as it is: binding is about speed, not correctness.
OpCpus fit_cpu_binding_to_op(uint64_t bytes, bool reapply);

// The CPU set of `cpus` (for sched_setaffinity; peer_pulling.h and home_keeping.h move threads too).
cpu_set_t cpu_set_of(const std::vector<int>& cpus);

}  // namespace fastcomm::shm
