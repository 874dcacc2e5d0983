#include "transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include <c10/util/Exception.h>
#include <c10/util/irange.h>

namespace fastcomm::shm {

namespace {

uint64_t random_u64() {
  std::random_device device;  // /dev/urandom on Linux
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

std::string random_name() {
  char name[64];
  std::snprintf(name, sizeof(name), "/fastcomm-%016llx%016llx", static_cast<unsigned long long>(random_u64()),
                static_cast<unsigned long long>(random_u64()));
  return name;
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

void* map(int fd, size_t bytes) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  return base == MAP_FAILED ? nullptr : base;
}

}  // namespace

std::unique_ptr<Segment> Segment::create(int local_size, size_t slot_bytes) {
  TORCH_CHECK(local_size >= 1, "fastcomm shm: local_size must be >= 1, got ", local_size);
  TORCH_CHECK(slot_bytes >= 1, "fastcomm shm: slot_bytes must be >= 1, got ", slot_bytes);
  slot_bytes = round_up(slot_bytes, kSlotAlignment);
  const size_t bytes = segment_bytes(local_size, slot_bytes);
  std::string name;
  FileDescriptor file{-1};
  for (int attempt = 0; attempt < 8 && file.fd < 0; ++attempt) {
    name = random_name();
    file.fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
    TORCH_CHECK(file.fd >= 0 || errno == EEXIST, "fastcomm shm: cannot create segment ", name, ": ", errno_text());
  }
  TORCH_CHECK(file.fd >= 0, "fastcomm shm: no unused segment name after 8 random tries");
  // From here on, any failure unlinks the name it created.
  auto fail = [&](const std::string& what) {
    const std::string reason = errno_text();
    ::shm_unlink(name.c_str());
    TORCH_CHECK(false, "fastcomm shm: ", what, " for segment ", name, " (", bytes, " bytes): ", reason);
  };
  if (::fchmod(file.fd, S_IRUSR | S_IWUSR) != 0) fail("fchmod 0600 failed");  // whatever the umask
  if (::ftruncate(file.fd, static_cast<off_t>(bytes)) != 0) fail("ftruncate failed (is /dev/shm full?)");
  void* base = map(file.fd, bytes);
  if (!base) fail("mmap failed");
  auto segment = std::unique_ptr<Segment>(new Segment(name, base, bytes));
  SegmentHeader* h = segment->header();
  h->version = kVersion;
  h->local_size = static_cast<uint32_t>(local_size);
  h->slot_bytes = slot_bytes;
  h->total_bytes = bytes;
  h->nonce = random_u64();
  h->wake_word.store(0);
  h->sleepers.store(0);
  h->failed_rank_plus_one.store(0);
  for (const auto r : c10::irange(local_size)) segment->control(r)->posted.store(0);
  // The magic goes last: an attacher that sees it sees a complete header.
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  return segment;
}

std::unique_ptr<Segment> Segment::attach(const std::string& name, int local_size, size_t slot_bytes, uint64_t nonce) {
  slot_bytes = round_up(slot_bytes, kSlotAlignment);
  const size_t bytes = segment_bytes(local_size, slot_bytes);
  FileDescriptor file{::shm_open(name.c_str(), O_RDWR, 0)};
  TORCH_CHECK(file.fd >= 0, "fastcomm shm: cannot open segment ", name, ": ", errno_text(),
              " (not the creator's /dev/shm?)");
  struct stat st {};
  TORCH_CHECK(::fstat(file.fd, &st) == 0, "fastcomm shm: fstat of ", name, " failed: ", errno_text());
  TORCH_CHECK(static_cast<size_t>(st.st_size) == bytes, "fastcomm shm: segment ", name, " has ", st.st_size,
              " bytes, expected ", bytes);
  TORCH_CHECK(st.st_uid == ::geteuid(), "fastcomm shm: segment ", name, " belongs to another user");
  void* base = map(file.fd, bytes);
  TORCH_CHECK(base, "fastcomm shm: mmap of ", name, " failed: ", errno_text());
  auto segment = std::unique_ptr<Segment>(new Segment(name, base, bytes));
  const SegmentHeader* h = segment->header();
  TORCH_CHECK(h->magic == kMagic, "fastcomm shm: segment ", name, " has a bad magic number");
  std::atomic_thread_fence(std::memory_order_acquire);
  TORCH_CHECK(h->version == kVersion, "fastcomm shm: segment ", name, " has layout version ", h->version,
              ", this build uses ", kVersion, " (mixed fastcomm versions on one host?)");
  TORCH_CHECK(h->nonce == nonce, "fastcomm shm: segment ", name, " is not the one the creator published (nonce)");
  TORCH_CHECK(h->local_size == static_cast<uint32_t>(local_size) && h->slot_bytes == slot_bytes &&
                  h->total_bytes == bytes,
              "fastcomm shm: segment ", name, " header says ", h->local_size, " ranks x ", h->slot_bytes,
              " bytes per slot, expected ", local_size, " x ", slot_bytes);
  return segment;
}

void Segment::unlink(const std::string& name) {
  if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    TORCH_WARN("fastcomm shm: shm_unlink(", name, ") failed: ", errno_text());
  }
}

Segment::~Segment() {
  ::munmap(base_, bytes_);
}

}  // namespace fastcomm::shm
