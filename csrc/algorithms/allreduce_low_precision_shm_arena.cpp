// allreduce_low_precision_shm_arena: the low-precision all_reduce
// (LowPrecisionWire, core/collective.h; the fp16/bf16 hooks' path) of a tensor
// that lives in this rank's shared-memory arena (DDP's buckets with
// DDP_DISABLE_COMM_MEM=0): peers' tensors are read in place and converted on
// the fly, so the wire dtype never exists outside the reducer's registers.
//
//   round 1: each rank says where its tensor lives; peers map it (as
//            allreduce_shm_arena, shm_arena_common.h);
//   reduce and distribute: rank r takes slice r of every rank's tensor piece
//            by piece: scale, clamp and round each rank's values to the wire
//            dtype, sum them in float32 in rank order, round once and widen
//            the sum into slice r of its own tensor, in one pass
//            (compress::low_precision_sum_cpu), then copy it into every
//            peer's; then the pieces of other slices nobody has claimed yet
//            (work sharing; both as allreduce_shm_arena);
//   round 2: each rank has published how many of every rank's values it
//            clamped, and nobody reads or writes a peer's tensor any more;
//            each rank adds up the clamps of its own values.
// The same conversions and the same rank-order sums as
// allreduce_low_precision_shm: the result is equal bit for bit, and so is each
// rank's clamp count (the clamps of its own values). Per source element the
// reducer reads the tensor once (no write into the segment and no read of it
// back). Below `min_bytes` (4 KiB by default) the segment path is as fast
// (benchmarks/arena_vs_ordinary.py --collective all_reduce_fp16;
// docs/compression.md "On arena buckets").
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/shm_arena_common.h"
#include "algorithms/shm_low_precision_common.h"
#include "kernels/cpu/compress_cpu.h"

namespace fastcomm {

namespace {

// Elements summed at a time: the piece of the sum is still in L1 when it is
// copied to the peers (larger pieces fall out of it, smaller ones add
// per-piece overhead; benchmarks/arena_vs_ordinary.py --collective
// all_reduce_fp16).
constexpr int64_t kPieceElements = 4096;

// Where a rank's clamp counts (one int64 per local rank) go in its slot: past
// the ArenaTensorRef a slow peer may still be reading from round 1.
constexpr size_t kClampCountsOffset = (sizeof(ArenaTensorRef) + 63) / 64 * 64;

class AllreduceLowPrecisionShmArena final : public ShmAlgorithm {
 public:
  AllreduceLowPrecisionShmArena(ShmTopology topology, std::shared_ptr<shm::Arena> arena, int64_t min_bytes,
                                int64_t async_min_bytes)
      : ShmAlgorithm(std::move(topology)),
        arena_(std::move(arena)),
        min_bytes_(min_bytes),
        async_min_bytes_(async_min_bytes) {}

  const char* name() const override {
    return "allreduce_low_precision_shm_arena";
  }

  bool accepts(const Collective& c) const override {
    if (!c.wire || !topology_.single_host() || !shm_eligible(c)) return false;
    const at::Tensor& t = c.inputs[0];
    return static_cast<int64_t>(t.nbytes()) >= min_bytes_ && t.nbytes() > 0 &&
           clamp_counts_fit(*topology_.engine, kClampCountsOffset) &&
           find_arena_tensor(*arena_, t.data_ptr(), t.nbytes()).has_value();
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const LowPrecisionOp op = low_precision_op(c);
    const ArenaTensorRef mine = *find_arena_tensor(*arena_, op.data, op.bytes);
    // By value (the engine excepted, which outlives its queued ops): a queued
    // op may run after this algorithm, and the backend, are gone.
    auto body = [&engine, arena = arena_, op, mine]() {
      const int n = engine.local_size(), me = engine.local_rank();
      const size_t element = c10::elementSize(op.dtype);
      const std::vector<char*> tensors = exchange_arena_tensors(engine, *arena, mine, op.data, op.bytes);
      std::vector<const void*> sources(n);
      std::vector<int64_t> clamped(n, 0);  // of each rank's values, in the pieces this rank sums
      for_each_claimed_piece(engine, op.count, kPieceElements, [&](int64_t offset, int64_t len) {
        char* const piece = op.data + offset * element;
        for (int q = 0; q < n; ++q) sources[q] = tensors[q] + offset * element;
        compress::low_precision_sum_cpu(sources.data(), n, op.dtype, op.wire.dtype, op.wire.scale, op.wire.limit, piece,
                                        len, clamped.data());
        for (int q = 0; q < n; ++q) {
          if (q != me) copy_bytes(tensors[q] + offset * element, piece, len * element);
        }
      });
      // Round 1's use, second round: nobody returns while a peer may still read or write its tensor.
      add_clamps(op.wire, exchange_clamp_counts(engine, clamped, kClampCountsOffset));
    };
    // Peers compare the wire dtype and the arena root: a rank with a plain
    // all_reduce, or with an ordinary tensor, makes every rank fail.
    return shm_run_sized(engine, c, low_precision_describe(protocol(), c, op, shm::kRootArena), std::move(body),
                         async_min_bytes_, op.bytes);
  }

 private:
  std::shared_ptr<shm::Arena> arena_;
  int64_t min_bytes_;
  int64_t async_min_bytes_;
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_low_precision_shm_arena(ShmTopology topology,
                                                                  std::shared_ptr<shm::Arena> arena, int64_t min_bytes,
                                                                  int64_t async_min_bytes) {
  return std::make_unique<AllreduceLowPrecisionShmArena>(std::move(topology), std::move(arena), min_bytes,
                                                         async_min_bytes);
}

}  // namespace fastcomm
