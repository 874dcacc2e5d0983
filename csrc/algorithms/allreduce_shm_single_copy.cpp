// allreduce_shm_single_copy: all_reduce of an ordinary tensor among the
// ranks of one host, read from and written into the peers' own tensors with
// Linux cross-memory attach (transport/shm/cross_memory.h) instead of copied
// through the segment: each byte a rank needs from a peer is copied once.
//
//   round 1: each rank puts its pid and its tensor's address in its slot;
//   reduce and distribute: rank r reads slice r of every peer's tensor, one
//            piece at a time, into a private buffer that stays in L2, reduces
//            the pieces with its own (rank order) into its own tensor, and
//            writes the result into every peer's tensor while it is still in
//            L2 (process_vm_writev). Only rank r reads or writes slice r of
//            any tensor, so nothing waits for anything in between;
//   round 2: nobody returns (and lets its caller touch the tensor) while a
//            peer may still read or write it.
// Per rank: (P-1)/P*S read from peers, S/P reduced, (P-1)/P*S written to
// peers, 2 rounds per op. Pushing the hot result beat pulling it from its
// owner after a round (the previous design) by 1.2-1.4x at 4-32 MiB and 2x at
// 128 KiB-2 MiB, and beats one-shot from 32 KiB on 2 ranks (docs/algorithms.md
// "Single copy for ordinary tensors").
//
// Permission: the first op of the group also asks every rank whether the
// kernel let it read and write every peer (one element each) and publishes
// the answer in one more round: if any rank was refused, this op runs
// two-shot's steps instead (allreduce_shm_twoshot.h), on every rank alike, and
// later ones go to one-shot or two-shot. A read or write refused later (a peer
// made itself non-dumpable) fails the op with the kernel's reason.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "algorithms/allreduce_shm_twoshot.h"
#include "algorithms/registry.h"
#include "kernels/cpu/reduce.h"
#include "transport/shm/cross_memory.h"
#include "transport/shm/waiting.h"

namespace fastcomm {

namespace {

// What each rank puts in its slot in round 1.
struct SingleCopyTensorRef {
  int64_t pid;
  uint64_t address;
  int32_t may_access_peers;  // the permission probe's answer (first op only; written after round 1)
};

// Bytes of a peer's slice read per call: the piece, the own tensor's piece and
// the result stay in L2 (measured 256 KiB-1 MiB; 512 KiB best at 16 MiB).
constexpr size_t kPieceBytes = 512 << 10;

class AllreduceShmSingleCopy final : public ShmAlgorithm {
 public:
  AllreduceShmSingleCopy(ShmTopology topology, std::shared_ptr<shm::Arena> arena, int64_t min_bytes,
                         int64_t max_bytes, int64_t async_min_bytes)
      : ShmAlgorithm(std::move(topology)),
        arena_(std::move(arena)),
        min_bytes_(min_bytes),
        max_bytes_(max_bytes),
        async_min_bytes_(async_min_bytes) {}

  const char* name() const override {
    return "allreduce_shm_single_copy";
  }

  // A refusal seen by an earlier op sends later ones to two-shot; an op
  // accepted before its predecessor found out runs two-shot's steps itself.
  bool accepts(const Collective& c) const override {
    if (min_bytes_ <= 0 || state_->permission.load(std::memory_order_acquire) == kRefused) return false;
    if (c.type != c10d::OpType::ALLREDUCE || !topology_.single_host() || !shm_reduces_one_tensor(c)) return false;
    const auto bytes = static_cast<int64_t>(c.inputs[0].nbytes());
    return bytes >= min_bytes_ && bytes <= max_bytes_ && !arena_->find(c.inputs[0].data_ptr(), bytes).has_value();
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const ShmReduction r = shm_reduction(c);
    // By value: the body may run on the op queue after launch returned, even after the group is gone.
    auto body = [state = state_, &engine, r]() { run(*state, engine, r); };
    return shm_run_sized(engine, c, shm_describe(c, r.total, r.total, -1), std::move(body), async_min_bytes_,
                         r.total);
  }

 private:
  static constexpr int kUnknown = 0, kGranted = 1, kRefused = 2;

  // What ops of the group carry from one to the next.
  struct State {
    std::atomic<int> permission{kUnknown};  // changed only inside ops, which every rank runs in the same order
    std::vector<char> pieces;                // a piece of each peer's slice; one op at a time uses it (engine.h)
  };

  static void run(State& state, shm::Engine& engine, const ShmReduction& r) {
    if (state.permission.load(std::memory_order_acquire) == kRefused) return run_allreduce_twoshot(engine, r);
    const int n = engine.local_size();
    engine.start_use();
    SingleCopyTensorRef mine{static_cast<int64_t>(::getpid()), reinterpret_cast<uint64_t>(r.data), 0};
    std::memcpy(engine.my_slot(), &mine, sizeof(mine));
    engine.round();
    std::vector<SingleCopyTensorRef> peers(n);
    for (int q = 0; q < n; ++q) std::memcpy(&peers[q], engine.slot_of(q), sizeof(SingleCopyTensorRef));
    if (state.permission.load(std::memory_order_acquire) == kUnknown) {
      // Same use as round 1: only the answer's bytes are written, which no peer reads before round 2.
      const int32_t answer = may_access_all(engine, peers, r) ? 1 : 0;
      std::memcpy(engine.my_slot() + offsetof(SingleCopyTensorRef, may_access_peers), &answer, sizeof(answer));
      engine.round();
      bool everyone = true;
      for (int q = 0; q < n; ++q) {
        int32_t theirs = 0;
        std::memcpy(&theirs, engine.slot_of(q) + offsetof(SingleCopyTensorRef, may_access_peers), sizeof(theirs));
        everyone = everyone && theirs == 1;
      }
      state.permission.store(everyone ? kGranted : kRefused, std::memory_order_release);
      if (!everyone) return run_allreduce_twoshot(engine, r);
    }
    reduce_and_distribute(engine, peers, r, state.pieces);
    shm_empty_round(engine);  // nobody returns while a peer may still read or write its tensor
  }

  // The probe: reads the first element of every peer's tensor and writes it
  // back unchanged (seccomp may allow one call and not the other; nobody
  // writes that element before the permission round). Where pids are not this
  // process's to see, e.g. another pid namespace, the answer is no.
  static bool may_access_all(const shm::Engine& engine, const std::vector<SingleCopyTensorRef>& peers,
                             const ShmReduction& r) {
    if (!engine.checks_pids()) return false;
    std::vector<char> element(r.element);
    for (int q = 0; q < engine.local_size(); ++q) {
      if (q == engine.local_rank()) continue;
      const int pid = static_cast<int>(peers[q].pid);
      if (!shm::read_process_memory(pid, peers[q].address, element.data(), r.element) ||
          !shm::write_process_memory(pid, peers[q].address, element.data(), r.element)) {
        return false;
      }
    }
    return true;
  }

  // Slice `me` of every rank's tensor, a piece at a time: the peers' pieces
  // read into `pieces` (L2), reduced with the own piece in rank order into the
  // own tensor, and the result written into every peer's tensor while it is
  // still in L2. Only this rank reads or writes slice `me` of any tensor.
  static void reduce_and_distribute(shm::Engine& engine, const std::vector<SingleCopyTensorRef>& peers,
                                    const ShmReduction& r, std::vector<char>& pieces) {
    const int n = engine.local_size(), me = engine.local_rank();
    const int64_t count = static_cast<int64_t>(r.total / r.element);
    const int64_t begin = slice_begin(count, n, me), end = slice_begin(count, n, me + 1);
    const int64_t per_piece = std::max<int64_t>(1, static_cast<int64_t>(kPieceBytes / r.element));
    pieces.resize(static_cast<size_t>(n) * per_piece * r.element);
    std::vector<const void*> sources(n);
    for (int64_t at = begin; at < end; at += per_piece) {
      const int64_t len = std::min(per_piece, end - at);
      const size_t offset = static_cast<size_t>(at) * r.element, bytes = static_cast<size_t>(len) * r.element;
      for (int q = 0; q < n; ++q) {
        if (q == me) {
          sources[q] = r.data + offset;
          continue;
        }
        char* piece = pieces.data() + static_cast<size_t>(q) * per_piece * r.element;
        access_or_fail(engine, peers[q], q, offset, piece, bytes, kRead);
        sources[q] = piece;
      }
      kernels::reduce(r.dtype, r.kind, sources.data(), n, r.data + offset, len);
      for (int q = 0; q < n; ++q) {
        if (q != me) access_or_fail(engine, peers[q], q, offset, r.data + offset, bytes, kWrite);
      }
    }
  }

  enum Access { kRead, kWrite };

  // Reads `bytes` at `offset` of a peer's tensor into `local`, or writes them
  // there from it. A peer that died meanwhile is named as the engine's waits
  // name one (ESRCH: its memory is gone); any other failure quotes the kernel.
  static void access_or_fail(shm::Engine& engine, const SingleCopyTensorRef& peer, int local_rank, size_t offset,
                             char* local, size_t bytes, Access access) {
    const int pid = static_cast<int>(peer.pid);
    const bool read = access == kRead;
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

  std::shared_ptr<shm::Arena> arena_;  // its tensors go to the arena algorithms
  int64_t min_bytes_, max_bytes_, async_min_bytes_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_shm_single_copy(ShmTopology topology, std::shared_ptr<shm::Arena> arena,
                                                          int64_t min_bytes, int64_t max_bytes,
                                                          int64_t async_min_bytes) {
  return std::make_unique<AllreduceShmSingleCopy>(std::move(topology), std::move(arena), min_bytes, max_bytes,
                                                  async_min_bytes);
}

}  // namespace fastcomm
