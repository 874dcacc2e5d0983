// The layout of a fastcomm shared-memory segment (one per process group and host).
//
//   [SegmentHeader, one page] [RankControl x local_size] [data: 2 buffers x local_size slots]
//   [p2p: local_size x local_size channels (src, dst), each a control page and a ring of slots]
//
// Every rank of the host maps the same segment. Each rank owns one RankControl
// (it alone writes it; peers read it) and one slot in each of the two data
// buffers. Slot sizes are multiples of 4096 bytes so every slot starts on a
// page (and cache-line) boundary. The point-to-point channels (p2p_channels.h)
// follow: channel (src, dst) carries messages from local rank src to local
// rank dst only; the diagonal (src == dst) is never used and, like every
// channel no pair uses, never touched, so the kernel never allocates its pages.
// Changing anything here bumps kVersion.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace fastcomm::shm {

constexpr uint64_t kMagic = 0x4d4d4f4354534146ull;  // "FASTCOMM" little-endian
constexpr uint32_t kVersion = 6;
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kControlBytes = 320;  // five cache lines per rank: no false sharing between ranks
constexpr size_t kSlotAlignment = 4096;
constexpr int kBuffers = 2;  // uses of the data buffers alternate (see engine.h)

// What each rank says about the op it is running, so peers can compare.
// OpDescriptor::root of an all_reduce whose tensors live in the ranks' arenas
// (arena.h): that protocol must not meet another on the same op.
constexpr int32_t kRootArena = -2;

// Packed into 28 bytes so that a rank's `posted` and both of its descriptors
// share one cache line (RankControl): a peer's round then fetches one line of
// it, not two (benchmarks/allreduce_vs_gloo.py --api cpp --sizes 8 measures
// the small all_reduce this serves).
struct __attribute__((packed, aligned(4))) OpDescriptor {
  uint32_t op_index;    // how many engine ops this rank ran before this one, mod 2^32
  int8_t type;          // c10d::OpType (every value but UNKNOWN fits)
  int8_t reduce_op;     // c10d::ReduceOp::RedOpType (-1: none)
  int16_t dtype;        // c10::ScalarType (-1: none)
  int16_t root;         // root's local rank (-1: none; kRootArena)
  // The algorithm that runs the op (protocol_code of its name): two ranks that
  // chose different algorithms for the same call run different protocols.
  uint16_t algorithm;
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
  // First cache line: what peers read every round.
  std::atomic<uint64_t> posted;   // rounds this rank has finished writing for (see engine.h)
  OpDescriptor descriptor[kBuffers];  // the op whose first round used buffer b
  // Second line: what peers read only while they wait long, or fail.
  alignas(64) int32_t pid;        // for liveness checks by peers
  std::atomic<int32_t> left;      // 1 once the rank shut its group down: peers still waiting for it stop
  // The CPU this rank ran on when it last posted a round or rang a peer's
  // point-to-point doorbell (sched_getcpu; -1 before either): a waiter that
  // finds the rank it waits for on its own CPU stops spinning and yields
  // (Engine::missing_rank_shares_cpu, P2pChannels::peer_shares_cpu). A hint
  // only: every wait still checks what it waits for.
  std::atomic<int32_t> cpu;
  // Pulling a preempted rank (peer_pulling.h): the thread that runs this
  // rank's ops (where the process is bound), and what peers did to it:
  // `moving` set before a peer changes that thread's CPU set, `moves` counted
  // after; the rank takes its own CPU set back when its op ends.
  std::atomic<int32_t> tid;
  std::atomic<int32_t> moving;
  std::atomic<uint32_t> moves;
  // Third line, written by the rank at every op's start and end (bound
  // processes): the ops it has begun and ended (a peer pulls it only while it
  // is inside one, never while it computes between ops) and its involuntary
  // context switches when its latest free op began. Off the second line,
  // which a waiting peer reads at once (`cpu`): sharing it, each of these
  // stores would take the line back from the peer before the next round's
  // post could complete, and small all_reduces would run at two speeds in
  // phases of hundreds of ops, as the peer happened to read.
  alignas(64) std::atomic<uint64_t> ops_begun;
  std::atomic<uint64_t> ops_ended;
  std::atomic<int64_t> free_op_switches;
  // Point-to-point doorbell of this rank, on its own cache line: a peer that
  // changed a channel this rank reads or writes bumps `p2p_doorbell` and, when
  // `p2p_sleepers` > 0, wakes the futex on it (p2p_channels.cpp).
  alignas(64) std::atomic<uint32_t> p2p_doorbell;
  std::atomic<uint32_t> p2p_sleepers;
  // Fifth line: how many pieces of this rank's share of the current op local
  // ranks have claimed (work sharing, Engine::claim_piece): this rank resets
  // it before the op's first round, any rank takes pieces after that round.
  alignas(64) std::atomic<uint64_t> pieces_claimed;
};

// Stores the CPU the calling thread runs on in `control.cpu`, only when it
// changed: waiting peers read that line, and a store takes it from them.
inline void publish_cpu(RankControl& control) {
  const int now_on = ::sched_getcpu();
  if (control.cpu.load(std::memory_order_relaxed) != now_on) control.cpu.store(now_on, std::memory_order_relaxed);
}

// Whether the rank of `control` last published `cpu` (a waiter's sched_getcpu).
// Never for -1: a rank that has not published yet, or a failed sched_getcpu.
inline bool last_ran_on(const RankControl& control, int cpu) {
  return cpu >= 0 && control.cpu.load(std::memory_order_relaxed) == cpu;
}

// Point-to-point channel geometry: a ring of kChannelSlots slots of
// kChannelSlotBytes (header included) per ordered pair of local ranks. 8 x 128
// KiB: a message of up to ~1 MiB is written in one go without waiting for the
// receiver, and larger ones stream through a ring that stays in the caches.
constexpr int kChannelSlots = 8;
constexpr size_t kChannelSlotBytes = 128 * 1024;
constexpr size_t kChannelControlBytes = 4096;

// The receiver's and the sender's counters on separate cache lines; both only grow.
struct ChannelControl {
  alignas(64) std::atomic<uint64_t> written;  // slots the sender has filled (sender writes, release)
  alignas(64) std::atomic<uint64_t> consumed;  // slots the receiver has emptied (receiver writes, release)
  // Set by the receiver when it refuses a message (size mismatch): the channel
  // is dead from then on and the sender fails with `refusal` (NUL-terminated).
  alignas(64) std::atomic<int32_t> refused;
  // Set by the receiver when it cannot read the sender's memory (ptrace rules):
  // the sender sends that message again through the ring, and every later one.
  std::atomic<int32_t> single_copy_refused;
  char refusal[512];
};

// The start of every channel slot; the payload follows at kChannelHeaderBytes.
// A slot either carries a chunk of the message, or (single_copy != 0) no
// payload but where the whole message lies in the sender's memory, for the
// receiver to read with process_vm_readv (p2p_channels.h).
struct ChannelSlotHeader {
  uint64_t message_bytes;  // the whole message
  uint64_t offset;         // of this chunk within the message
  uint64_t chunk_bytes;    // payload bytes in this slot
  int64_t tag;
  uint64_t address;        // single copy: the message in the sender's address space
  int32_t pid;             // single copy: the sender's pid
  int32_t single_copy;
};
constexpr size_t kChannelHeaderBytes = 64;
constexpr size_t kChannelPayloadBytes = kChannelSlotBytes - kChannelHeaderBytes;

static_assert(sizeof(OpDescriptor) == 28, "descriptor must stay packed (RankControl's first line)");
static_assert(offsetof(RankControl, descriptor) + sizeof(RankControl::descriptor) <= 64,
              "posted and the descriptors must share one cache line");
static_assert(offsetof(RankControl, ops_begun) / 64 != offsetof(RankControl, cpu) / 64 &&
                  offsetof(RankControl, free_op_switches) / 64 == offsetof(RankControl, ops_begun) / 64,
              "the per-op counters must not share the line a waiting peer reads (`cpu`)");
static_assert(sizeof(SegmentHeader) <= kHeaderBytes, "header must fit its page");
static_assert(sizeof(RankControl) <= kControlBytes, "control block must fit its cache lines");
static_assert(sizeof(ChannelControl) <= kChannelControlBytes, "channel control must fit its page");
static_assert(sizeof(ChannelSlotHeader) <= kChannelHeaderBytes, "slot header must fit its cache line");
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

// Where the collectives' part ends: the p2p channels start here.
inline size_t p2p_offset(int local_size, size_t slot_bytes) {
  return slot_offset(local_size, slot_bytes, kBuffers, 0);
}

constexpr size_t kChannelBytes = kChannelControlBytes + kChannelSlots * kChannelSlotBytes;

inline size_t channel_offset(int local_size, size_t slot_bytes, int src, int dst) {
  return p2p_offset(local_size, slot_bytes) + (static_cast<size_t>(src) * local_size + dst) * kChannelBytes;
}

inline size_t segment_bytes(int local_size, size_t slot_bytes) {
  return channel_offset(local_size, slot_bytes, local_size, 0);
}

}  // namespace fastcomm::shm
