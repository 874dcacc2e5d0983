// Reading another process's memory in one copy: Linux cross-memory attach
// (process_vm_readv), as MPICH's and Open MPI's shared-memory transports do
// for large messages. The kernel allows it where ptrace would be allowed
// (same user and the target dumpable, or CAP_SYS_PTRACE; Yama's ptrace_scope
// and seccomp may forbid it), so every caller has a path for a refusal.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastcomm::shm {

// Copies `bytes` from `address` in process `pid` to `into`. False when the
// kernel refuses or fails (EPERM, ESRCH, ENOSYS, EFAULT; errno says which);
// `into` may then hold part of the data.
bool read_process_memory(int pid, uint64_t address, void* into, size_t bytes);

// Copies `bytes` from `from` to `address` in process `pid` (process_vm_writev;
// the same permission as reading). False as above; part may have been written.
bool write_process_memory(int pid, uint64_t address, const void* from, size_t bytes);

}  // namespace fastcomm::shm
