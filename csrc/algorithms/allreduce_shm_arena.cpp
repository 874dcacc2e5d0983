// allreduce_shm_arena: all_reduce among the ranks of one host of a tensor that
// lives in this rank's shared-memory arena (transport/shm/arena.h; the
// backend's allocateTensor, DDP's buckets with DDP_DISABLE_COMM_MEM=0). Peers
// read each other's tensors in place: nothing is copied into the segment or
// out of it.
//
//   round 1: each rank writes where its tensor lives (BlockRef, offset) into
//            its slot; peers map those blocks (once; cached);
//   reduce:  rank r sums slice r of every rank's tensor in rank order into
//            slice r of its own (only rank r reads slice r of anyone now);
//   round 2, gather: each rank copies slice q of rank q's tensor into its own;
//   round 3: no rank returns (and lets its caller write the tensor) while a
//            peer may still read it.
// Per rank: S read + S/P written to reduce, (P-1)/P*S read and written to
// gather, against twoshot's extra copy in and the slot round trips. Every rank
// must pass an arena tensor: the descriptor says so (root = kRootArena), so a
// rank that passes an ordinary tensor makes the op fail on every rank with
// "ranks disagree" instead of mixing protocols.
#include <cstring>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/shm_common.h"
#include "kernels/cpu/reduce.h"
#include "transport/shm/arena.h"

namespace fastcomm {

namespace {

struct ArenaTensorRef {
  shm::BlockRef block;
  uint64_t offset;
};

class AllreduceShmArena final : public ShmAlgorithm {
 public:
  AllreduceShmArena(ShmTopology topology, std::shared_ptr<shm::Arena> arena, int64_t async_min_bytes)
      : ShmAlgorithm(std::move(topology)), arena_(std::move(arena)), async_min_bytes_(async_min_bytes) {}

  const char* name() const override {
    return "allreduce_shm_arena";
  }

  bool accepts(const Collective& c) const override {
    return c.type == c10d::OpType::ALLREDUCE && topology_.single_host() && shm_reduces_one_tensor(c) &&
           arena_->find(c.inputs[0].data_ptr(), c.inputs[0].nbytes()).has_value();
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const ShmReduction r = shm_reduction(c);
    const auto [block, offset] = *arena_->find(r.data, r.total);
    const ArenaTensorRef mine{block, offset};
    // By value (the engine excepted, which outlives its queued ops): a queued
    // op may run after this algorithm, and the backend, are gone.
    auto body = [&engine, arena = arena_, ops = ops_, r, mine]() {
      const int n = engine.local_size(), me = engine.local_rank();
      const uint64_t op = ++*ops;
      engine.start_use();
      std::memcpy(engine.my_slot(), &mine, sizeof(mine));
      engine.round();
      std::vector<const char*> tensors(n);
      for (int q = 0; q < n; ++q) {
        if (q == me) {
          tensors[q] = r.data;
          continue;
        }
        ArenaTensorRef theirs;
        std::memcpy(&theirs, engine.slot_of(q), sizeof(theirs));
        if (theirs.offset + r.total > theirs.block.bytes) {
          engine.abort_op(c10::str("local rank ", q, "'s arena tensor does not fit its block"));
        }
        try {
          tensors[q] = arena->peer_block(q, theirs.block, op) + theirs.offset;
        } catch (const c10::Error& e) {
          engine.abort_op(e.what_without_backtrace());
        }
      }
      const int64_t count = static_cast<int64_t>(r.total / r.element);
      std::vector<const void*> slices(n);
      const int64_t begin = slice_begin(count, n, me), end = slice_begin(count, n, me + 1);
      for (int q = 0; q < n; ++q) slices[q] = tensors[q] + begin * r.element;
      kernels::reduce(r.dtype, r.kind, slices.data(), n, r.data + begin * r.element, end - begin);
      engine.round();
      for (int q = 0; q < n; ++q) {
        if (q == me) continue;
        const int64_t b = slice_begin(count, n, q), e = slice_begin(count, n, q + 1);
        copy_bytes(r.data + b * r.element, tensors[q] + b * r.element, (e - b) * r.element);
      }
      engine.start_use();  // a buffer use spans at most two rounds; this one writes nothing
      engine.round();
    };
    const shm::OpDescriptor descriptor = shm_describe(c, r.total, r.total, shm::kRootArena);
    return shm_run_sized(engine, c, descriptor, std::move(body), async_min_bytes_, r.total);
  }

 private:
  std::shared_ptr<shm::Arena> arena_;
  int64_t async_min_bytes_;
  // Arena all_reduces run (counted under the engine's op mutex): ages peers' mappings.
  std::shared_ptr<uint64_t> ops_ = std::make_shared<uint64_t>(0);
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_shm_arena(ShmTopology topology, std::shared_ptr<shm::Arena> arena,
                                                    int64_t async_min_bytes) {
  return std::make_unique<AllreduceShmArena>(std::move(topology), std::move(arena), async_min_bytes);
}

}  // namespace fastcomm
