// allreduce_shm_single_copy: all_reduce of an ordinary tensor among the
// ranks of one host, read from and written into the peers' own tensors with
// Linux cross-memory attach instead of copied through the segment
// (shm_single_copy.h has the steps): each byte a rank needs from a peer is
// copied once.
//
// Per rank: (P-1)/P*S read from peers, S/P reduced, (P-1)/P*S written to
// peers, 2 rounds per op. Pushing the result while it is in the writer's
// cache beats pulling it from its owner after a round, and with a CPU per rank
// single copy beats one-shot from its automatic minimum (benchmarks/peers/run.py
// --libraries fastcomm; docs/algorithms.md "Single copy for ordinary
// tensors"). Where a rank is refused cross-memory
// access, the group's first op runs two-shot's steps (allreduce_shm_twoshot.h)
// and later ones go to one-shot or two-shot.
#include <memory>

#include "algorithms/allreduce_shm_twoshot.h"
#include "algorithms/registry.h"
#include "algorithms/shm_single_copy.h"
#include "kernels/cpu/reduce.h"
#include "transport/shm/arena.h"

namespace fastcomm {

namespace {

class AllreduceShmSingleCopy final : public ShmAlgorithm {
 public:
  AllreduceShmSingleCopy(ShmTopology topology, std::shared_ptr<shm::Arena> arena, int64_t min_bytes, int64_t max_bytes,
                         int64_t huge_pages_min_bytes, int64_t async_min_bytes)
      : ShmAlgorithm(std::move(topology)),
        arena_(std::move(arena)),
        min_bytes_(min_bytes),
        max_bytes_(max_bytes),
        async_min_bytes_(async_min_bytes),
        state_(std::make_shared<SingleCopyState>(huge_pages_min_bytes)) {}

  const char* name() const override {
    return "allreduce_shm_single_copy";
  }

  // A refusal seen by an earlier op sends later ones to two-shot; an op
  // accepted before its predecessor found out runs two-shot's steps itself.
  bool accepts(const Collective& c) const override {
    if (min_bytes_ <= 0 || state_->refused()) return false;
    if (c.type != c10d::OpType::ALLREDUCE || !topology_.single_host() || !shm_reduces_one_tensor(c)) return false;
    const auto bytes = static_cast<int64_t>(c.inputs[0].nbytes());
    return bytes >= min_bytes_ && bytes <= max_bytes_ && !arena_->find(c.inputs[0].data_ptr(), bytes).has_value();
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const ShmReduction r = shm_reduction(c);
    // By value: the body may run on the op queue after launch returned, even after the group is gone.
    auto body = [state = state_, &engine, r]() { run(*state, engine, r); };
    return shm_run_sized(engine, c, shm_describe(protocol(), c, r.total, r.total, -1), std::move(body),
                         async_min_bytes_, r.total);
  }

 private:
  static void run(SingleCopyState& state, shm::Engine& engine, const ShmReduction& r) {
    const auto peers = state.exchange(engine, r.data, r.total, r.element);
    if (!peers) return run_allreduce_twoshot(engine, r);
    const auto reduce = [&r, n = engine.local_size()](const void* const* sources, void* dst, int64_t count) {
      kernels::reduce(r.dtype, r.kind, sources, n, dst, count);
    };
    state.reduce_and_distribute(engine, *peers, r.data, r.element, static_cast<int64_t>(r.total / r.element), reduce);
    shm_empty_round(engine);  // nobody returns while a peer may still read or write its tensor
  }

  std::shared_ptr<shm::Arena> arena_;  // its tensors go to the arena algorithms
  int64_t min_bytes_, max_bytes_, async_min_bytes_;
  std::shared_ptr<SingleCopyState> state_;
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_shm_single_copy(ShmTopology topology, std::shared_ptr<shm::Arena> arena,
                                                          int64_t min_bytes, int64_t max_bytes,
                                                          int64_t huge_pages_min_bytes, int64_t async_min_bytes) {
  return std::make_unique<AllreduceShmSingleCopy>(std::move(topology), std::move(arena), min_bytes, max_bytes,
                                                  huge_pages_min_bytes, async_min_bytes);
}

}  // namespace fastcomm
