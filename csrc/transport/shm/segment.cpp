#include "transport/shm/segment.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include "transport/shm/shared_file.h"

namespace fastcomm::shm {

namespace {

uint64_t random_u64() {
  std::random_device device;  // /dev/urandom on Linux
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

std::string errno_text() {
  return std::strerror(errno);
}

// Closes the descriptor on every path; the mapping stays valid without it.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels refuse it and pages fault in on first use
#endif

// Maps the whole segment but faults in only the collectives' part up front
// (`populate` bytes): the p2p channels (local_size^2 MiB) get pages only when
// a pair of ranks first uses them.
void* map(int fd, size_t bytes, size_t populate) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return nullptr;
  ::madvise(base, populate, MADV_POPULATE_WRITE);
  return base;
}

}  // namespace

std::unique_ptr<Segment> Segment::create(int local_size, size_t slot_bytes) {
  TORCH_CHECK(local_size >= 1, "fastcomm shm: local_size must be >= 1, got ", local_size);
  TORCH_CHECK(slot_bytes >= 1, "fastcomm shm: slot_bytes must be >= 1, got ", slot_bytes);
  slot_bytes = round_up(slot_bytes, kSlotAlignment);
  const size_t bytes = segment_bytes(local_size, slot_bytes);
  FileDescriptor file{create_shared_file("fastcomm-segment", bytes, "fastcomm shm")};
  void* base = map(file.fd, bytes, p2p_offset(local_size, slot_bytes));
  TORCH_CHECK(base, "fastcomm shm: mmap of ", bytes, " bytes failed: ", errno_text());
  const std::string name = shared_file_path(::getpid(), file.fd);
  auto segment = std::unique_ptr<Segment>(new Segment(name, base, bytes, file.fd));
  file.fd = -1;  // the segment owns it now
  SegmentHeader* h = segment->header();
  h->version = kVersion;
  h->local_size = static_cast<uint32_t>(local_size);
  h->slot_bytes = slot_bytes;
  h->total_bytes = bytes;
  h->nonce = random_u64();
  h->wake_word.store(0);
  h->sleepers.store(0);
  h->failed_rank_plus_one.store(0);
  for (const auto r : c10::irange(local_size)) {
    segment->control(r)->posted.store(0);
    segment->control(r)->cpu.store(-1);  // no CPU yet: matches no waiter's (a waiter on CPU 0 would yield needlessly)
  }
  // The magic goes last: an attacher that sees it sees a complete header.
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  return segment;
}

std::unique_ptr<Segment> Segment::attach(const std::string& name, int local_size, size_t slot_bytes, uint64_t nonce) {
  slot_bytes = round_up(slot_bytes, kSlotAlignment);
  const size_t bytes = segment_bytes(local_size, slot_bytes);
  std::string why;
  FileDescriptor file{open_shared_file(name, bytes, /*writable=*/true, why)};
  TORCH_CHECK(file.fd >= 0, "fastcomm shm: cannot open segment ", name, ": ", why);
  void* base = map(file.fd, bytes, p2p_offset(local_size, slot_bytes));
  TORCH_CHECK(base, "fastcomm shm: mmap of ", name, " failed: ", errno_text());
  auto segment = std::unique_ptr<Segment>(new Segment(name, base, bytes, -1));
  const SegmentHeader* h = segment->header();
  TORCH_CHECK(h->magic == kMagic, "fastcomm shm: segment ", name, " has a bad magic number");
  std::atomic_thread_fence(std::memory_order_acquire);
  TORCH_CHECK(h->version == kVersion, "fastcomm shm: segment ", name, " has layout version ", h->version,
              ", this build uses ", kVersion, " (mixed fastcomm versions on one host?)");
  TORCH_CHECK(h->nonce == nonce, "fastcomm shm: segment ", name, " is not the one the creator published (nonce)");
  TORCH_CHECK(
      h->local_size == static_cast<uint32_t>(local_size) && h->slot_bytes == slot_bytes && h->total_bytes == bytes,
      "fastcomm shm: segment ", name, " header says ", h->local_size, " ranks x ", h->slot_bytes,
      " bytes per slot, expected ", local_size, " x ", slot_bytes);
  return segment;
}

Segment::~Segment() {
  ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace fastcomm::shm
