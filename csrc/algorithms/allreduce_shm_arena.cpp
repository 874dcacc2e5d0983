// allreduce_shm_arena: all_reduce among the ranks of one host of a tensor that
// lives in this rank's shared-memory arena (transport/shm/arena.h; the
// backend's allocateTensor, DDP's buckets with DDP_DISABLE_COMM_MEM=0). Peers
// read and write each other's tensors in place: nothing is copied into the
// segment or out of it.
//
//   round 1: each rank writes where its tensor lives (BlockRef, offset) into
//            its slot; peers map those blocks (once; cached);
//   reduce and distribute: rank r sums slice r of every rank's tensor in rank
//            order into slice r of its own, a piece at a time, and copies
//            each summed piece into every peer's tensor while it is still in
//            this core's cache; then it does the same for the pieces of other
//            slices nobody has claimed yet (work sharing, shm_common.h
//            for_each_claimed_piece). Only the rank that claimed a piece
//            reads or writes it in any tensor, so nothing waits in between;
//   round 2: no rank returns (and lets its caller touch the tensor) while a
//            peer may still read or write it.
// Per rank: S read + S/P written to reduce, (P-1)/P*S written to peers;
// pushing the result while it is in cache beats pulling it from its owner
// after a round (benchmarks/arena_vs_ordinary.py; docs/algorithms.md "The
// arena"). Every rank must pass an
// arena tensor: the descriptor says so (root = kRootArena), so a rank that
// passes an ordinary tensor makes the op fail on every rank with "ranks
// disagree" instead of mixing protocols.
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/shm_arena_common.h"
#include "kernels/cpu/reduce.h"

namespace fastcomm {

namespace {

// Bytes of the own slice summed, then copied to the peers, at a time: the sum
// is still in L2 when it is copied.
constexpr size_t kPushPieceBytes = 256 << 10;

class AllreduceShmArena final : public ShmAlgorithm {
 public:
  AllreduceShmArena(ShmTopology topology, std::shared_ptr<shm::Arena> arena, int64_t min_bytes, int64_t async_min_bytes)
      : ShmAlgorithm(std::move(topology)),
        arena_(std::move(arena)),
        min_bytes_(min_bytes),
        async_min_bytes_(async_min_bytes) {}

  const char* name() const override {
    return "allreduce_shm_arena";
  }

  bool accepts(const Collective& c) const override {
    return c.type == c10d::OpType::ALLREDUCE && topology_.single_host() && shm_reduces_one_tensor(c) &&
           static_cast<int64_t>(c.inputs[0].nbytes()) >= min_bytes_ &&
           find_arena_tensor(*arena_, c.inputs[0].data_ptr(), c.inputs[0].nbytes()).has_value();
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const ShmReduction r = shm_reduction(c);
    const ArenaTensorRef mine = *find_arena_tensor(*arena_, r.data, r.total);
    // By value (the engine excepted, which outlives its queued ops): a queued
    // op may run after this algorithm, and the backend, are gone.
    auto body = [&engine, arena = arena_, r, mine]() {
      const int n = engine.local_size(), me = engine.local_rank();
      const std::vector<char*> tensors = exchange_arena_tensors(engine, *arena, mine, r.data, r.total);
      const int64_t count = static_cast<int64_t>(r.total / r.element);
      const int64_t per_piece = std::max<int64_t>(1, static_cast<int64_t>(kPushPieceBytes / r.element));
      std::vector<const void*> sources(n);
      for_each_claimed_piece(engine, count, per_piece, [&](int64_t at, int64_t len) {
        const size_t offset = static_cast<size_t>(at) * r.element, bytes = static_cast<size_t>(len) * r.element;
        for (int q = 0; q < n; ++q) sources[q] = tensors[q] + offset;
        kernels::reduce(r.dtype, r.kind, sources.data(), n, r.data + offset, len);
        for (int q = 0; q < n; ++q) {
          if (q != me) copy_bytes(tensors[q] + offset, r.data + offset, bytes);
        }
      });
      shm_empty_round(engine);  // nobody returns while a peer may still read or write its tensor
    };
    const shm::OpDescriptor descriptor = shm_describe(protocol(), c, r.total, r.total, shm::kRootArena);
    return shm_run_sized(engine, c, descriptor, std::move(body), async_min_bytes_, r.total);
  }

 private:
  std::shared_ptr<shm::Arena> arena_;
  int64_t min_bytes_;  // smaller arena tensors run one-shot
  int64_t async_min_bytes_;
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_shm_arena(ShmTopology topology, std::shared_ptr<shm::Arena> arena,
                                                    int64_t min_bytes, int64_t async_min_bytes) {
  return std::make_unique<AllreduceShmArena>(std::move(topology), std::move(arena), min_bytes, async_min_bytes);
}

}  // namespace fastcomm
