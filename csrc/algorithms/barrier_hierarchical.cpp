// barrier_hierarchical: barrier over several hosts: one round inside each
// host (every local rank has arrived), a Gloo barrier among the leaders (every
// host has), one round inside each host (the leader is back). No data.
#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"

namespace fastcomm {

namespace {

class BarrierHierarchical final : public HierarchicalAlgorithm {
 public:
  using HierarchicalAlgorithm::HierarchicalAlgorithm;

  const char* name() const override {
    return "barrier_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (!runs_here()) return false;
    return c.type == c10d::OpType::BARRIER;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    auto one_round = [&]() { shm_empty_round(engine); };
    HierarchicalSteps steps;
    steps.inside_before = one_round;
    steps.among_leaders = [&]() {
      c10d::BarrierOptions options;
      options.timeout = c.timeout;
      leaders_->barrier(options)->wait(c.timeout);
    };
    steps.inside_after = one_round;
    return run_hierarchical(topology_, c, shm_describe(protocol(), c, 0, 0, -1), leaders_.get(), steps);
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_barrier_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders) {
  return std::make_unique<BarrierHierarchical>(std::move(topology), std::move(leaders));
}

}  // namespace fastcomm
