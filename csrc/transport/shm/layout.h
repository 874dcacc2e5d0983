// The layout of a fastcomm shared-memory segment (one per process group and host).
//
//   [SegmentHeader, one page] [RankControl x local_size] [data: 2 buffers x local_size slots]
//
// Every rank of the host maps the same segment. Each rank owns one RankControl
// (it alone writes it; peers read it) and one slot in each of the two data
// buffers. Slot sizes are multiples of 4096 bytes so every slot starts on a
// page (and cache-line) boundary. Changing anything here bumps kVersion.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace fastcomm::shm {

constexpr uint64_t kMagic = 0x4d4d4f4354534146ull;  // "FASTCOMM" little-endian
constexpr uint32_t kVersion = 2;
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kControlBytes = 256;  // four cache lines per rank: no false sharing between ranks
constexpr size_t kSlotAlignment = 4096;
constexpr int kBuffers = 2;  // uses of the data buffers alternate (see engine.h)

// What each rank says about the op it is running, so peers can compare.
struct OpDescriptor {
  uint64_t op_index;    // how many engine ops this rank ran before this one
  int32_t type;         // c10d::OpType
  int32_t dtype;        // c10::ScalarType (-1: none)
  int32_t reduce_op;    // c10d::ReduceOp::RedOpType (-1: none)
  int32_t root;         // root's local rank (-1: none)
  uint64_t input_bytes;
  uint64_t output_bytes;
};

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t local_size;
  uint64_t slot_bytes;
  uint64_t total_bytes;
  uint64_t nonce;  // random, published through the store: proves the attacher opened the creator's segment
  // The futex word sleepers wait on; posters bump it and wake when `sleepers` > 0.
  std::atomic<uint32_t> wake_word;
  std::atomic<uint32_t> sleepers;
  // Set (to failing local rank + 1) by a rank whose op failed; peers stop waiting and fail too.
  // The first rank to fail claims `failure_claim`, writes why into
  // `failure_reason` (NUL-terminated) and then publishes failed_rank_plus_one
  // (release), so peers can quote the cause; later failures only raise locally.
  std::atomic<int32_t> failed_rank_plus_one;
  std::atomic<int32_t> failure_claim;
  char failure_reason[1024];
};

struct RankControl {
  std::atomic<uint64_t> posted;   // rounds this rank has finished writing for (see engine.h)
  int32_t pid;                    // for liveness checks by peers
  std::atomic<int32_t> left;      // 1 once the rank shut its group down: peers still waiting for it stop
  OpDescriptor descriptor[kBuffers];  // the op whose first round used buffer b
};

static_assert(sizeof(SegmentHeader) <= kHeaderBytes, "header must fit its page");
static_assert(sizeof(RankControl) <= kControlBytes, "control block must fit its cache lines");
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free to work across processes");

inline size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

inline size_t control_offset(int local_rank) {
  return kHeaderBytes + static_cast<size_t>(local_rank) * kControlBytes;
}

inline size_t data_offset(int local_size) {
  return round_up(kHeaderBytes + static_cast<size_t>(local_size) * kControlBytes, kSlotAlignment);
}

inline size_t slot_offset(int local_size, size_t slot_bytes, int buffer, int local_rank) {
  return data_offset(local_size) + (static_cast<size_t>(buffer) * local_size + local_rank) * slot_bytes;
}

inline size_t segment_bytes(int local_size, size_t slot_bytes) {
  return slot_offset(local_size, slot_bytes, kBuffers, 0);
}

}  // namespace fastcomm::shm
