// allreduce_hierarchical: all_reduce over several hosts, pipelined.
//
// The tensor (S bytes) is cut into pieces of FASTCOMM_PIPELINE_PIECE_BYTES, or
// S/4 when larger;
// per piece k, in run_pipelined's frame (hierarchical.h):
//   before(k): inside each host, reduce piece k to the host's leader through
//              the segment, slot by slot (each rank writes the piece, the
//              leader reads P);
//   leaders:   all_reduce piece k among the leaders with Gloo, not waited for
//              (network per leader: 2*(H-1)/H of the piece, ring);
//   after(k):  inside each host, broadcast the leader's piece k.
// Network bytes per leader for the whole tensor: 2*(H-1)/H*S, against Gloo's
// 2*(N-1)/N*S per rank on every rank's link. Everything is bitwise the same on
// all ranks: each leader reduces in local rank order, Gloo gives every leader
// the same bits, and after() copies.
#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"

namespace fastcomm {

namespace {

class AllreduceHierarchical final : public HierarchicalAlgorithm {
 public:
  using HierarchicalAlgorithm::HierarchicalAlgorithm;

  const char* name() const override {
    return "allreduce_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (!runs_here()) return false;
    return c.type == c10d::OpType::ALLREDUCE && shm_reduces_one_tensor(c);
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const ShmReduction r = shm_reduction(c);
    // At most 4 pieces: each is a Gloo all_reduce, which costs more per op than send/recv.
    const size_t piece = pipeline_piece_bytes(std::max(max_piece_, r.total / 4), r.element, r.total);
    auto piece_of = [&](size_t k) {
      ShmReduction p = r;
      p.data = r.data + k * piece;
      p.total = std::min(piece, r.total - k * piece);
      return p;
    };
    PipelinedSteps steps;
    steps.pieces = pieces_of(r.total, piece);
    steps.inside_before = [&](size_t k) { shm_reduce_chunks(engine, piece_of(k), 0); };
    steps.start_among_leaders = [&](size_t k) {
      const ShmReduction p = piece_of(k);
      c10d::AllreduceOptions options;
      options.reduceOp = c.reduce_op;
      options.timeout = c.timeout;
      std::vector<at::Tensor> tensors{byte_range(c.inputs[0], k * piece, p.total)};
      return LeaderWorks{leaders_->allreduce(tensors, options)};
    };
    steps.inside_after = [&](size_t k) {
      const ShmReduction p = piece_of(k);
      shm_broadcast_chunks(engine, p.data, p.total, 0);
    };
    return run_pipelined(topology_, c, shm_describe(protocol(), c, r.total, r.total, 0), leaders_.get(), steps);
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders,
                                                       int64_t max_piece) {
  return std::make_unique<AllreduceHierarchical>(std::move(topology), std::move(leaders), max_piece);
}

}  // namespace fastcomm
