// broadcast_hierarchical: broadcast over several hosts.
//
// Steps, for a root on host h:
//   1. on host h, the root broadcasts through the segment to its local ranks
//      (its host's leader among them);
//   2. the leaders broadcast among themselves with Gloo from host h's leader
//      (the `leaders` group: one rank per host, rank = host index);
//   3. on every other host, the leader broadcasts through the segment.
// Each rank takes part in one shared-memory step only (1 on the root's host,
// 3 elsewhere), so the network carries one copy per host instead of one per
// rank. A host with a single rank has no segment: its rank is its leader and
// only takes part in step 2.
#include "algorithms/registry.h"
#include "algorithms/shm_common.h"

namespace fastcomm {

namespace {

class BroadcastHierarchical final : public Algorithm {
 public:
  BroadcastHierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders)
      : topology_(std::move(topology)), leaders_(std::move(leaders)) {}

  const char* name() const override {
    return "broadcast_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    return c.type == c10d::OpType::BROADCAST && shm_eligible(c) && c.inputs.size() == 1;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    const int root = static_cast<int>(c.peer);
    const int root_host = topology_.host_of_rank[root];
    const bool on_root_host = topology_.host_of_rank[topology_.group_rank] == root_host;
    if (!topology_.engine) {  // alone on its host: step 2 is the whole op
      try {
        leaders_broadcast(c, root_host);
      } catch (...) {
        return failed(std::current_exception());
      }
      return completed(c.result_tensors());
    }
    shm::Engine& engine = *topology_.engine;
    const at::Tensor& t = c.inputs[0];
    const size_t total = t.nbytes();
    const int local_root = on_root_host ? topology_.local_rank_of(root) : 0;
    return shm_run(engine, c, shm_describe(c, total, total, local_root), [&]() {
      const bool leader = engine.local_rank() == 0;
      if (leader && !on_root_host) leaders_step(engine, c, root_host);  // 2, before 3
      shm_broadcast_chunks(engine, byte_ptr(t), total, local_root);    // 1 or 3
      if (leader && on_root_host) leaders_step(engine, c, root_host);   // 2, after 1
    });
  }

 private:
  void leaders_broadcast(Collective& c, int root_host) {
    TORCH_INTERNAL_ASSERT(leaders_, "fastcomm broadcast: a host leader without the leaders' group");
    c10d::BroadcastOptions options;
    options.rootRank = root_host;
    options.timeout = c.timeout;
    std::vector<at::Tensor> tensors{c.inputs[0]};
    leaders_->broadcast(tensors, options)->wait(c.timeout);
  }

  // Step 2 inside the shared-memory op: a failure there also stops the local
  // peers (they may be waiting for step 3's first round).
  void leaders_step(shm::Engine& engine, Collective& c, int root_host) {
    try {
      leaders_broadcast(c, root_host);
    } catch (const std::exception& e) {
      engine.abort_op(c10::str("the broadcast among host leaders failed: ", e.what()));
    }
  }

  ShmTopology topology_;
  c10::intrusive_ptr<c10d::Backend> leaders_;
};

}  // namespace

std::unique_ptr<Algorithm> make_broadcast_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders) {
  return std::make_unique<BroadcastHierarchical>(std::move(topology), std::move(leaders));
}

}  // namespace fastcomm
