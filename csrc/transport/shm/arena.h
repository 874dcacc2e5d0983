// Shared-memory blocks of one rank of a group: the memory behind the backend's
// allocateTensor (DDP's gradient buckets when DDP_DISABLE_COMM_MEM=0), which
// the host's other ranks read in place (algorithms/allreduce_shm_arena.cpp:
// no copy into the segment, none out of it).
//
// Each block is an anonymous memory file (memfd) of its own, mapped here and,
// on first use in a collective, read-only by each peer through
// /proc/<pid>/fd/<fd> (as the segment is; peers open it while the owner's
// tensor is alive and in that very collective, so the descriptor names that
// block). A block's memory is freed when its tensor is gone and no peer maps it
// any longer: peers drop a mapping unused for kPeerMappingIdleOps arena
// collectives, and all of them with the group. Nothing has a name anywhere,
// so a crash leaves nothing behind.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

namespace fastcomm::shm {

// What a peer needs to map a block (written into the owner's slot per op).
struct BlockRef {
  int32_t pid;
  int32_t fd;
  uint64_t serial;  // unique among the owner's blocks: the peers' cache key
  uint64_t bytes;
};

class Arena {
 public:
  // One block: unmapped and closed when the last holder lets go.
  struct Block {
    void* base = nullptr;
    size_t bytes = 0;
    int fd = -1;
    uint64_t serial = 0;
    ~Block();
  };

  // A block of at least `bytes` (whole pages) whose first `bytes` are zero: an
  // idle one of this arena when one fits (at most twice the size), else a new one.
  std::shared_ptr<Block> allocate(size_t bytes);
  // A block its tensor no longer uses: kept idle for a later allocate while the
  // idle blocks stay within kIdleBytesMax, else freed. FSDP2 allocates its
  // buffers per collective: a new block each time would cost a new file, page
  // faults and a new mapping on every peer (benchmarks/fsdp2_vs_gloo.py
  // --arena measures the step); an idle
  // block keeps its serial, so the peers' mappings of it stay valid.
  void release(std::shared_ptr<Block> block);
  // The live block of this rank holding [ptr, ptr + bytes), and ptr's offset in it.
  std::optional<std::pair<BlockRef, size_t>> find(const void* ptr, size_t bytes) const;
  // Counts this group's arena collectives (every algorithm that reads peers'
  // blocks calls it once per op): returns the new op's number for peer_block.
  uint64_t begin_collective() {
    return collectives_.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  // Peer `local_rank`'s block `ref`, mapped read-write (cached; all_reduce
  // writes its results into the peers' tensors). `op` is the caller's
  // begin_collective(): mappings idle for kPeerMappingIdleOps are dropped.
  char* peer_block(int local_rank, const BlockRef& ref, uint64_t op);
  // Blocks of this rank held by tensors, idle ones, and peers' blocks mapped here (tests, stats).
  size_t live_blocks() const;
  size_t idle_blocks() const;
  size_t peer_mappings() const;

  static constexpr uint64_t kPeerMappingIdleOps = 64;
  static constexpr size_t kIdleBytesMax = size_t{256} << 20;

 private:
  struct PeerMapping {
    void* base = nullptr;
    size_t bytes = 0;
    uint64_t last_op = 0;
    ~PeerMapping();
  };

  mutable std::mutex mutex_;
  std::atomic<uint64_t> collectives_{0};
  uint64_t next_serial_ = 1;
  std::map<uintptr_t, std::weak_ptr<Block>> blocks_;                            // by base address
  std::multimap<size_t, std::shared_ptr<Block>> idle_;                          // by size
  size_t idle_bytes_ = 0;
  std::map<std::pair<int, uint64_t>, std::unique_ptr<PeerMapping>> peers_;  // by (local rank, serial)
};

}  // namespace fastcomm::shm
