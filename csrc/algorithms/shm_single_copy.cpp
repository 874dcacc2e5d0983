#include "algorithms/shm_single_copy.h"

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "transport/shm/cross_memory.h"
#include "transport/shm/huge_pages.h"
#include "transport/shm/waiting.h"

namespace fastcomm {

namespace {

// Bytes of a peer's slice read per call: the piece, the own tensor's piece and
// the result stay in L2 (benchmarks/peers/run.py --libraries fastcomm measures
// the large all_reduce this serves).
constexpr size_t kSingleCopyPieceBytes = 512 << 10;

// The probe: reads the first element of every peer's tensor and writes it
// back unchanged (seccomp may allow one call and not the other; nobody writes
// that element before the permission round). Where pids are not this
// process's to see, e.g. another pid namespace, the answer is no.
bool may_access_all(const shm::Engine& engine, const std::vector<SingleCopyTensorRef>& peers, size_t element) {
  if (!engine.checks_pids()) return false;
  std::vector<char> first(element);
  for (int q = 0; q < engine.local_size(); ++q) {
    if (q == engine.local_rank()) continue;
    const int pid = static_cast<int>(peers[q].pid);
    if (!shm::read_process_memory(pid, peers[q].address, first.data(), element) ||
        !shm::write_process_memory(pid, peers[q].address, first.data(), element)) {
      return false;
    }
  }
  return true;
}

enum class Access { kRead, kWrite };

// Reads `bytes` at `offset` of a peer's tensor into `local`, or writes them
// there from it. A peer that died meanwhile is named as the engine's waits
// name one (ESRCH: its memory is gone); any other failure quotes the kernel.
void access_or_fail(shm::Engine& engine, const SingleCopyTensorRef& peer, int local_rank, size_t offset, char* local,
                    size_t bytes, Access access) {
  const int pid = static_cast<int>(peer.pid);
  const bool read = access == Access::kRead;
  const bool done = read ? shm::read_process_memory(pid, peer.address + offset, local, bytes)
                         : shm::write_process_memory(pid, peer.address + offset, local, bytes);
  if (done) return;
  const int error = errno;
  const int them = engine.group_rank_of(local_rank), me = engine.group_rank_of(engine.local_rank());
  if (error == ESRCH || !shm::process_alive(pid)) {
    engine.abort_op(c10::str("rank ", them, " (pid ", pid, ") on this host exited while rank ", me, " ",
                             read ? "read" : "wrote", " its tensor"));
  }
  engine.abort_op(c10::str("cannot ", read ? "read" : "write", " rank ", them, "'s tensor (",
                           read ? "process_vm_readv" : "process_vm_writev", ": ", std::strerror(error),
                           "); it was accessible when the group's first large all_reduce asked"));
}

}  // namespace

std::optional<std::vector<SingleCopyTensorRef>> SingleCopyState::exchange(shm::Engine& engine, char* data, size_t bytes,
                                                                          size_t element) {
  const int n = engine.local_size();
  shm::collapse_when_reused(data, bytes, static_cast<size_t>(huge_pages_min_bytes_));  // before peers see it
  engine.start_use();
  SingleCopyTensorRef mine{static_cast<int64_t>(::getpid()), reinterpret_cast<uint64_t>(data), 0};
  std::memcpy(engine.my_slot(), &mine, sizeof(mine));
  engine.open_my_pieces();  // published by this round: peers may claim pieces of my slice after it
  engine.round();
  std::vector<SingleCopyTensorRef> peers(n);
  for (int q = 0; q < n; ++q) std::memcpy(&peers[q], engine.slot_of(q), sizeof(SingleCopyTensorRef));
  if (permission_.load(std::memory_order_acquire) == kUnknown) {
    // Same use as round 1: only the answer's bytes are written, which no peer reads before round 2.
    const int32_t answer = may_access_all(engine, peers, element) ? 1 : 0;
    std::memcpy(engine.my_slot() + offsetof(SingleCopyTensorRef, may_access_peers), &answer, sizeof(answer));
    engine.round();
    bool everyone = true;
    for (int q = 0; q < n; ++q) {
      int32_t theirs = 0;
      std::memcpy(&theirs, engine.slot_of(q) + offsetof(SingleCopyTensorRef, may_access_peers), sizeof(theirs));
      everyone = everyone && theirs == 1;
    }
    permission_.store(everyone ? kGranted : kRefused, std::memory_order_release);
  }
  if (refused()) return std::nullopt;
  return peers;
}

void SingleCopyState::reduce_and_distribute(shm::Engine& engine, const std::vector<SingleCopyTensorRef>& peers,
                                            char* data, size_t element, int64_t count, const SingleCopyReduce& reduce) {
  const int n = engine.local_size(), me = engine.local_rank();
  const int64_t per_piece = std::max<int64_t>(1, static_cast<int64_t>(kSingleCopyPieceBytes / element));
  pieces_.resize(static_cast<size_t>(n) * per_piece * element);
  std::vector<const void*> sources(n);
  for_each_claimed_piece(engine, count, per_piece, [&](int64_t at, int64_t len) {
    const size_t offset = static_cast<size_t>(at) * element, bytes = static_cast<size_t>(len) * element;
    for (int q = 0; q < n; ++q) {
      if (q == me) {
        sources[q] = data + offset;
        continue;
      }
      char* piece = pieces_.data() + static_cast<size_t>(q) * per_piece * element;
      access_or_fail(engine, peers[q], q, offset, piece, bytes, Access::kRead);
      sources[q] = piece;
    }
    reduce(sources.data(), data + offset, len);
    for (int q = 0; q < n; ++q) {
      if (q != me) access_or_fail(engine, peers[q], q, offset, data + offset, bytes, Access::kWrite);
    }
  });
}

}  // namespace fastcomm
