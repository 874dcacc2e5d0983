// reduce_shm: reduce to a root among the ranks of one host.
//
// Per chunk of at most one slot: every rank copies its chunk into its slot,
// one round, the root reduces all P slots in rank order into its tensor (each
// rank writes S; the root reads P*S). Other ranks' tensors are left unchanged,
// as Gloo and NCCL leave them.
#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"
#include "algorithms/shm_common.h"

namespace fastcomm {

namespace {

class ReduceShm final : public ShmAlgorithm {
 public:
  using ShmAlgorithm::ShmAlgorithm;

  const char* name() const override {
    return "reduce_shm";
  }

  bool accepts(const Collective& c) const override {
    return c.type == c10d::OpType::REDUCE && topology_.single_host() && shm_reduces_one_tensor(c);
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const ShmReduction r = shm_reduction(c);
    const int root = static_cast<int>(c.peer);
    return shm_run(engine, c, shm_describe(protocol(), c, r.total, r.total, root),
                   [&]() { shm_reduce_chunks(engine, r, root); });
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_reduce_shm(ShmTopology topology) {
  return std::make_unique<ReduceShm>(std::move(topology));
}

}  // namespace fastcomm
