#include "transport/shm/cross_memory.h"

#include <sys/uio.h>

namespace fastcomm::shm {

bool read_process_memory(int pid, uint64_t address, void* into, size_t bytes) {
  char* const out = static_cast<char*>(into);
  size_t done = 0;
  while (done < bytes) {  // the kernel may copy less than asked (a partial read): go on from there
    struct iovec local{out + done, bytes - done};
    struct iovec remote{reinterpret_cast<void*>(address + done), bytes - done};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool write_process_memory(int pid, uint64_t address, const void* from, size_t bytes) {
  const char* const in = static_cast<const char*>(from);
  size_t done = 0;
  while (done < bytes) {  // a partial write: go on from there
    struct iovec local{const_cast<char*>(in + done), bytes - done};
    struct iovec remote{reinterpret_cast<void*>(address + done), bytes - done};
    const ssize_t n = ::process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace fastcomm::shm
