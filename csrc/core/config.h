// The configuration of one fastcomm process group, built once in Python and
// handed to the backend as one object:
//   - the options: fastcomm/_options.py reads every environment variable, once,
//     and owns every default (README lists them); the fields here mirror its
//     Options dataclass by name, and fastcomm/_backend.py copies them field by
//     field, so an option missing here fails loudly at group creation;
//   - the host plan: fastcomm/_shm.py's rendezvous result;
//   - what the process can do: why CUDA tensors cannot run, if they cannot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fastcomm {

struct Config {
  // Options (fastcomm/_options.py, README's table).
  int64_t gloo_threads = 0;
  int64_t allreduce_allgather_max_bytes = 0;
  bool shm = false;
  bool shm_spin_budget = false;  // applied to the engine by the backend (Engine::set_follows_spin_budget)
  int64_t shm_slot_bytes = 0;
  int64_t shm_oneshot_max_bytes = 0;
  int64_t shm_async_min_bytes = 0;
  int64_t shm_allreduce_single_copy_min_bytes = 0;
  int64_t shm_allreduce_single_copy_max_bytes = 0;
  int64_t shm_huge_pages_min_bytes = 0;
  int64_t shm_low_precision_arena_min_bytes = 0;
  int64_t shm_arena_min_bytes = 0;
  int64_t shm_bind_cpus = 0;  // used in Python only (fastcomm/_shm.py binds at set-up)
  int64_t shm_unbound_min_bytes = 0;  // used through _C.set_cpu_binding (fastcomm/_shm.py, at set-up)
  int64_t pipeline_piece_bytes = 0;
  int64_t p2p_single_copy_bytes = 0;
  int64_t ranks_per_host = 0;
  std::string socket_ifname;  // used in Python only (the internal Gloo groups' interfaces)

  // Host plan (fastcomm/_shm.py): the host index (0..H-1, hosts ordered by
  // their lowest rank) of every group rank when the group runs hierarchical
  // (several hosts, every host ready); empty otherwise.
  std::vector<int> host_of_rank;

  // Empty when CUDA collectives can run; otherwise why not (no NCCL, no GPU).
  std::string cuda_unavailable_reason;
};

}  // namespace fastcomm
