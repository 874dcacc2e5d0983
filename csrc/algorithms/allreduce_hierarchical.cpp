// allreduce_hierarchical: all_reduce over several hosts.
//
// Steps (hierarchical.h's frame), for a tensor of S bytes on H hosts:
//   1. inside each host, reduce to the host's leader (its lowest rank) through
//      the segment: per slot-sized chunk every rank writes S, the leader reads P*S;
//   2. the leaders all_reduce among themselves with Gloo (2*(H-1)/H*S over the
//      network per leader);
//   3. inside each host, broadcast the leader's result through the segment.
// Everything is bitwise the same on all ranks: each host's leader reduces in
// local rank order, Gloo gives every leader the same bits, and step 3 copies.
// A host with a single rank skips steps 1 and 3.
#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"

namespace fastcomm {

namespace {

class AllreduceHierarchical final : public ShmAlgorithm {
 public:
  AllreduceHierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders)
      : ShmAlgorithm(std::move(topology)), leaders_(std::move(leaders)) {}

  const char* name() const override {
    return "allreduce_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (!topology_.hierarchical() || (topology_.leads_host() && !leaders_)) return false;
    return c.type == c10d::OpType::ALLREDUCE && shm_reduces_one_tensor(c);
  }

  Launched launch(Collective& c, Dispatcher&) override {
    const ShmReduction r = shm_reduction(c);
    HierarchicalSteps steps;
    steps.inside_before = [&]() { shm_reduce_chunks(*topology_.engine, r, 0); };
    steps.among_leaders = [&]() {
      c10d::AllreduceOptions options;
      options.reduceOp = c.reduce_op;
      options.timeout = c.timeout;
      std::vector<at::Tensor> tensors{c.inputs[0]};
      leaders_->allreduce(tensors, options)->wait(c.timeout);
    };
    steps.inside_after = [&]() { shm_broadcast_chunks(*topology_.engine, r.data, r.total, 0); };
    return run_hierarchical(topology_, c, shm_describe(c, r.total, r.total, 0), steps);
  }

 private:
  c10::intrusive_ptr<c10d::Backend> leaders_;
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders) {
  return std::make_unique<AllreduceHierarchical>(std::move(topology), std::move(leaders));
}

}  // namespace fastcomm
