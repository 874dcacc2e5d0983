// reduce_hierarchical: reduce to a root over several hosts, pipelined.
//
// The tensor (S bytes) is cut into pieces of FASTCOMM_PIPELINE_PIECE_BYTES; per
// piece k, in run_pipelined's frame (hierarchical.h), for a root on host R:
//   before(k): inside each host, slot by slot, every rank writes its piece,
//              one round, the leader reduces the P slots in local rank order
//              into its sum (the root's tensor when it is the root, else a
//              buffer of its own);
//   leaders:   Gloo reduce of the sums to host R's leader, not waited for
//              (network per leader: about S, as Gloo's reduce moves per rank);
//   after(k):  on host R, when the root is not its leader, the leader passes
//              the piece to the root through its slot.
// Other ranks' tensors are left unchanged, as Gloo and NCCL leave them.
#include <vector>

#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"
#include "kernels/cpu/reduce.h"

namespace fastcomm {

namespace {

class ReduceHierarchical final : public HierarchicalAlgorithm {
 public:
  using HierarchicalAlgorithm::HierarchicalAlgorithm;

  const char* name() const override {
    return "reduce_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (!runs_here()) return false;
    return c.type == c10d::OpType::REDUCE && shm_reduces_one_tensor(c);
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const ShmReduction r = shm_reduction(c);
    const RootPlacement root = place_root(static_cast<int>(c.peer));
    const bool leads = topology_.leads_host(), leader_is_root = leads && root.is_root;
    const size_t piece = pipeline_piece_bytes(max_piece_, r.element, r.total);
    auto length = [&](size_t k) { return std::min(piece, r.total - k * piece); };
    at::Tensor sums;  // the leader's sums of two pieces (one being reduced, one on the wire), unless it is the root
    if (leads && !leader_is_root) sums = at::empty({2, static_cast<int64_t>(piece / r.element)}, c.inputs[0].options());
    auto sum_of = [&](size_t k) {
      return leader_is_root ? byte_range(c.inputs[0], k * piece, length(k)) : byte_range(sums[k % 2], 0, length(k));
    };

    PipelinedSteps steps;
    steps.pieces = pieces_of(r.total, piece);
    steps.inside_before = [&](size_t k) {
      char* into = leads ? byte_ptr(sum_of(k)) : nullptr;
      std::vector<const void*> slots(engine.local_size());
      for_each_chunk(length(k), engine.slot_bytes() / r.element * r.element, [&](size_t at, size_t len) {
        engine.start_use();
        copy_bytes(engine.my_slot(), r.data + k * piece + at, len);
        engine.round();
        if (!leads) return;
        for (int q = 0; q < engine.local_size(); ++q) slots[q] = engine.slot_of(q);
        kernels::reduce(r.dtype, r.kind, slots.data(), engine.local_size(), into + at,
                        static_cast<int64_t>(len / r.element));
      });
    };
    steps.start_among_leaders = [&](size_t k) {
      if (length(k) == 0) return LeaderWorks{};
      c10d::ReduceOptions options;
      options.reduceOp = c.reduce_op;
      options.rootRank = root.host;
      options.timeout = c.timeout;
      std::vector<at::Tensor> tensors{sum_of(k)};
      return LeaderWorks{leaders_->reduce(tensors, options)};
    };
    steps.inside_after = [&](size_t k) {
      if (!root.on_root_host || root.local_root == 0) return;
      shm_pass_chunks(engine, leads ? byte_ptr(sum_of(k)) : nullptr, r.data + k * piece, length(k), 0, root.local_root);
    };
    return run_pipelined(topology_, c, shm_describe(protocol(), c, r.total, r.total, root.local_root), leaders_.get(),
                         steps);
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_reduce_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders,
                                                    int64_t max_piece) {
  return std::make_unique<ReduceHierarchical>(std::move(topology), std::move(leaders), max_piece);
}

}  // namespace fastcomm
