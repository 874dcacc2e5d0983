// barrier_shm: barrier among the ranks of one host: one round, no data.
#include "algorithms/registry.h"
#include "algorithms/shm_common.h"

namespace fastcomm {

namespace {

class BarrierShm final : public ShmAlgorithm {
 public:
  using ShmAlgorithm::ShmAlgorithm;

  const char* name() const override {
    return "barrier_shm";
  }

  bool accepts(const Collective& c) const override {
    return c.type == c10d::OpType::BARRIER && topology_.single_host();
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    return shm_run(engine, c, shm_describe(protocol(), c, 0, 0, -1), [&]() { shm_empty_round(engine); });
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_barrier_shm(ShmTopology topology) {
  return std::make_unique<BarrierShm>(std::move(topology));
}

}  // namespace fastcomm
