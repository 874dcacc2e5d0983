// allreduce_hierarchical: all_reduce over several hosts.
//
// Steps, for a tensor of S bytes on H hosts:
//   1. inside each host, reduce to the host's leader (its lowest rank) through
//      the segment: per slot-sized chunk every rank writes S, the leader reads P*S;
//   2. the leaders all_reduce among themselves with Gloo (the `leaders` group:
//      one rank per host; 2*(H-1)/H*S over the network per leader);
//   3. inside each host, broadcast the leader's result through the segment.
// Everything is bitwise the same on all ranks: each host's leader reduces in
// local rank order, Gloo gives every leader the same bits, and step 3 copies.
// A host with a single rank skips steps 1 and 3. Runs when the group spans
// more than one host and every host could set up its engine (the rendezvous
// in fastcomm/_shm.py decides that for the whole group at once).
#include "algorithms/registry.h"
#include "algorithms/shm_common.h"
#include "common/errors.h"

#include <vector>

namespace fastcomm {

namespace {

class AllreduceHierarchical final : public Algorithm {
 public:
  AllreduceHierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders)
      : topology_(std::move(topology)), leaders_(std::move(leaders)) {}

  const char* name() const override {
    return "allreduce_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (c.type != c10d::OpType::ALLREDUCE || !shm_eligible(c) || c.inputs.size() != 1) return false;
    return shm_reduce_kind(c.reduce_op, c.inputs[0].scalar_type()).has_value();
  }

  Launched launch(Collective& c, Dispatcher&) override {
    if (!topology_.engine) {  // alone on its host: the leaders' all_reduce is the whole op
      try {
        leaders_all_reduce(c);
      } catch (...) {
        return failed(std::current_exception());
      }
      return completed(c.result_tensors());
    }
    shm::Engine& engine = *topology_.engine;
    const at::Tensor& t = c.inputs[0];
    const auto dtype = t.scalar_type();
    const auto kind = *shm_reduce_kind(c.reduce_op, dtype);
    const size_t total = t.nbytes(), element = t.element_size();
    return shm_run(engine, c, shm_describe(c, total, total, 0), [&]() {
      const int n = engine.local_size();
      const bool leader = engine.local_rank() == 0;
      const size_t chunk = engine.slot_bytes() / element * element;
      std::vector<const void*> slots(n);
      char* data = byte_ptr(t);
      size_t offset = 0;
      do {  // 1. reduce to the leader
        const size_t len = std::min(chunk, total - offset);
        engine.start_use();
        copy_bytes(engine.my_slot(), data + offset, len);
        engine.round();
        if (leader) {
          for (int r = 0; r < n; ++r) slots[r] = engine.slot_of(r);
          kernels::reduce(dtype, kind, slots.data(), n, data + offset, static_cast<int64_t>(len / element));
        }
        offset += len;
      } while (offset < total);
      if (leader) {  // 2. among the leaders; local peers wait in step 3's first round
        try {
          leaders_all_reduce(c);
        } catch (const std::exception& e) {
          engine.abort_op(c10::str("the all_reduce among host leaders failed: ", e.what()));
        }
      }
      shm_broadcast_chunks(engine, data, total, 0);  // 3. from the leader
    });
  }

 private:
  void leaders_all_reduce(Collective& c) {
    TORCH_INTERNAL_ASSERT(leaders_, "fastcomm all_reduce: a host leader without the leaders' group");
    c10d::AllreduceOptions options;
    options.reduceOp = c.reduce_op;
    options.timeout = c.timeout;
    std::vector<at::Tensor> tensors{c.inputs[0]};
    auto work = leaders_->allreduce(tensors, options);
    work->wait(c.timeout);
  }

  ShmTopology topology_;
  c10::intrusive_ptr<c10d::Backend> leaders_;
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders) {
  return std::make_unique<AllreduceHierarchical>(std::move(topology), std::move(leaders));
}

}  // namespace fastcomm
