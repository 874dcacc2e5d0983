// allreduce_shm_oneshot: small all_reduce among the ranks of one host.
//
// Per chunk of at most one slot: every rank copies its chunk into its slot
// (S bytes written), one round, then every rank reduces all P slots in rank
// order into its tensor (P*S read, S written). One round of synchronisation per
// chunk; every rank computes the same sums in the same order, so results are
// bitwise identical. Best while P*S reads stay cheaper than a second round.
// Those reads grow with P and the P readers share the memory bandwidth, so the
// cost grows like P^2 against two-shot's ~2S: one-shot runs while
// S * (P-1)^2 <= `max_bytes` (FASTCOMM_SHM_ONESHOT_MAX_BYTES, the 2-rank
// threshold). The crossover is measured by benchmarks/allreduce_vs_gloo.py
// --api cpp with FASTCOMM_SHM_ONESHOT_MAX_BYTES=0 (two-shot) against a large
// value (one-shot) (docs/algorithms.md "The one-host all_reduce family").
#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"
#include "algorithms/shm_common.h"

namespace fastcomm {

namespace {

class AllreduceShmOneshot final : public ShmAlgorithm {
 public:
  AllreduceShmOneshot(ShmTopology topology, int64_t max_bytes)
      : ShmAlgorithm(std::move(topology)), max_bytes_(max_bytes) {}

  const char* name() const override {
    return "allreduce_shm_oneshot";
  }

  bool accepts(const Collective& c) const override {
    if (c.type != c10d::OpType::ALLREDUCE || !topology_.single_host() || !shm_reduces_one_tensor(c)) return false;
    const int64_t others = topology_.group_size - 1;
    return static_cast<int64_t>(c.inputs[0].nbytes()) * others * others <= max_bytes_;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const ShmReduction r = shm_reduction(c);
    return shm_run(engine, c, shm_describe(protocol(), c, r.total, r.total, -1),
                   [&]() { shm_reduce_chunks(engine, r, kEveryRank); });
  }

 private:
  int64_t max_bytes_;
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_shm_oneshot(ShmTopology topology, int64_t max_bytes) {
  return std::make_unique<AllreduceShmOneshot>(std::move(topology), max_bytes);
}

}  // namespace fastcomm
