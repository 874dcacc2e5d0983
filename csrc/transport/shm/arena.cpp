#include "transport/shm/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <c10/util/Exception.h>

#include "transport/shm/shared_file.h"

namespace fastcomm::shm {

namespace {

size_t whole_pages(size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

}  // namespace

Arena::Block::~Block() {
  if (base) ::munmap(base, bytes);
  if (fd >= 0) ::close(fd);
}

Arena::PeerMapping::~PeerMapping() {
  if (base) ::munmap(base, bytes);
}

std::shared_ptr<Arena::Block> Arena::allocate(size_t bytes) {
  const size_t need = whole_pages(bytes);
  std::shared_ptr<Block> reused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = idle_.lower_bound(need);
    if (it != idle_.end() && it->first <= 2 * need) {
      reused = std::move(it->second);
      idle_bytes_ -= reused->bytes;
      idle_.erase(it);
    }
  }
  if (reused) {
    std::memset(reused->base, 0, bytes);
    return reused;
  }
  auto block = std::make_shared<Block>();
  block->bytes = need;
  block->fd = create_shared_file("fastcomm-arena", block->bytes, "fastcomm allocate_tensor");
  void* base = ::mmap(nullptr, block->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, block->fd, 0);
  TORCH_CHECK(base != MAP_FAILED, "fastcomm allocate_tensor: mmap of ", block->bytes,
              " bytes failed: ", std::strerror(errno));
  block->base = base;
  std::lock_guard<std::mutex> lock(mutex_);
  block->serial = next_serial_++;
  for (auto it = blocks_.begin(); it != blocks_.end();) it = it->second.expired() ? blocks_.erase(it) : std::next(it);
  blocks_[reinterpret_cast<uintptr_t>(base)] = block;
  return block;
}

std::optional<std::pair<BlockRef, size_t>> Arena::find(const void* ptr, size_t bytes) const {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) return std::nullopt;
  --it;
  const std::shared_ptr<Block> block = it->second.lock();
  if (!block || address + bytes > it->first + block->bytes) return std::nullopt;
  const BlockRef ref{static_cast<int32_t>(::getpid()), block->fd, block->serial, block->bytes};
  return std::make_pair(ref, static_cast<size_t>(address - it->first));
}

char* Arena::peer_block(int local_rank, const BlockRef& ref, uint64_t op) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = peers_.begin(); it != peers_.end();) {
    it = op - it->second->last_op > kPeerMappingIdleOps ? peers_.erase(it) : std::next(it);
  }
  std::unique_ptr<PeerMapping>& mapping = peers_[{local_rank, ref.serial}];
  if (!mapping) {
    const std::string path = shared_file_path(ref.pid, ref.fd);
    std::string why;
    void* base = MAP_FAILED;
    const int fd = open_shared_file(path, ref.bytes, /*writable=*/true, why);
    if (fd >= 0) {
      base = ::mmap(nullptr, ref.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) why = c10::str("mmap of ", ref.bytes, " bytes failed: ", std::strerror(errno));
      ::close(fd);  // the mapping keeps the file
    }
    if (base == MAP_FAILED) {
      peers_.erase({local_rank, ref.serial});
      TORCH_CHECK(false, "cannot map local rank ", local_rank, "'s arena block ", path, ": ", why);
    }
    mapping = std::make_unique<PeerMapping>();
    mapping->base = base;
    mapping->bytes = ref.bytes;
  }
  mapping->last_op = op;
  return static_cast<char*>(mapping->base);
}

void Arena::release(std::shared_ptr<Block> block) {
  std::shared_ptr<Block> freed;  // unmapped after the lock is let go
  std::lock_guard<std::mutex> lock(mutex_);
  if (!block) return;
  if (idle_bytes_ + block->bytes <= kIdleBytesMax) {
    idle_bytes_ += block->bytes;
    idle_.emplace(block->bytes, std::move(block));
  } else {
    freed = std::move(block);
  }
}

size_t Arena::live_blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const auto& [address, block] : blocks_) n += !block.expired();
  return n - idle_.size();
}

size_t Arena::idle_blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return idle_.size();
}

size_t Arena::peer_mappings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peers_.size();
}

}  // namespace fastcomm::shm
