// broadcast_hierarchical: broadcast over several hosts.
//
// Steps (hierarchical.h's frame), for a root on host h:
//   on host h:      inside, the root broadcasts through the segment to its
//                   local ranks (its host's leader among them); then the
//                   leaders' step;
//   among leaders:  broadcast with Gloo from host h's leader;
//   on other hosts: the leaders' step, then inside, the leader broadcasts
//                   through the segment.
// Each rank takes part in one shared-memory step only, so the network carries
// one copy per host instead of one per rank. A host with a single rank takes
// part in the leaders' step only.
#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"

namespace fastcomm {

namespace {

class BroadcastHierarchical final : public HierarchicalAlgorithm {
 public:
  using HierarchicalAlgorithm::HierarchicalAlgorithm;

  const char* name() const override {
    return "broadcast_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (!runs_here()) return false;
    return c.type == c10d::OpType::BROADCAST && shm_eligible(c) && c.inputs.size() == 1;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    const RootPlacement root = place_root(static_cast<int>(c.peer));
    const int local_root = root.on_root_host ? root.local_root : 0;  // elsewhere the leader passes it on
    const at::Tensor& t = c.inputs[0];
    const size_t total = t.nbytes();
    auto inside = [&]() { shm_broadcast_chunks(*topology_.engine, byte_ptr(t), total, local_root); };
    HierarchicalSteps steps;
    (root.on_root_host ? steps.inside_before : steps.inside_after) = inside;
    steps.among_leaders = [&]() {
      c10d::BroadcastOptions options;
      options.rootRank = root.host;
      options.timeout = c.timeout;
      std::vector<at::Tensor> tensors{t};
      leaders_->broadcast(tensors, options)->wait(c.timeout);
    };
    return run_hierarchical(topology_, c, shm_describe(protocol(), c, total, total, local_root), leaders_.get(), steps);
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_broadcast_hierarchical(ShmTopology topology,
                                                       c10::intrusive_ptr<c10d::Backend> leaders) {
  return std::make_unique<BroadcastHierarchical>(std::move(topology), std::move(leaders));
}

}  // namespace fastcomm
