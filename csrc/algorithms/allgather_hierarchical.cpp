// allgather_hierarchical: all_gather / all_gather_into_tensor over several
// hosts, pipelined.
//
// Each rank's input (B bytes) is cut into pieces of FASTCOMM_PIPELINE_PIECE_BYTES / N
// (a piece of the whole output); per piece k, in run_pipelined's frame (hierarchical.h):
//   before(k): inside each host, slot by slot, every rank writes its piece
//              into its slot, one round, every rank copies its host's P
//              pieces to their places in its output (the host's own data
//              never leaves it);
//   leaders:   each leader sends its host's P pieces (from its output) to
//              every other leader and receives theirs straight into its
//              output, not waited for (Gloo send/recv, any host sizes);
//   after(k):  inside each host the leader broadcasts the other hosts' N-P
//              pieces through its slot.
// Network bytes per leader: sends (H-1)*P*B, receives (N-P)*B; Gloo's ring
// moves (N-1)*B through every rank's link.
#include <vector>

#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"

namespace fastcomm {

namespace {

class AllgatherHierarchical final : public HierarchicalAlgorithm {
 public:
  using HierarchicalAlgorithm::HierarchicalAlgorithm;

  const char* name() const override {
    return "allgather_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (!runs_here()) return false;
    if (!shm_eligible(c) || c.inputs.size() != 1) return false;
    if (c.type == c10d::OpType::_ALLGATHER_BASE) return c.outputs.size() == 1;
    return c.type == c10d::OpType::ALLGATHER && c.output_lists.size() == 1;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const int n = topology_.group_size, me = hosts_.my_host;
    const std::vector<int>& mine = hosts_.ranks_of_host[me];
    const at::Tensor& input = c.inputs[0];
    const size_t total = input.nbytes(), element = input.element_size();
    const bool base = c.type == c10d::OpType::_ALLGATHER_BASE;
    // Rank r's block of the output, and its bytes [offset, offset + len) as a tensor for Gloo.
    auto block = [&](int r) { return base ? byte_ptr(c.outputs[0]) + r * total : byte_ptr(c.output_lists[0][r]); };
    auto block_range = [&](int r, size_t offset, size_t len) {
      return base ? byte_range(c.outputs[0], r * total + offset, len) : byte_range(c.output_lists[0][r], offset, len);
    };
    std::vector<char*> host_blocks(mine.size());  // where each local rank's bytes go
    for (size_t q = 0; q < mine.size(); ++q) host_blocks[q] = block(mine[q]);
    // A piece is cut from the whole output (N blocks): the leader's bytes in flight stay near 2 pieces.
    const size_t piece = pipeline_piece_bytes(max_piece_, element, total, n);
    auto length = [&](size_t k) { return std::min(piece, total - k * piece); };

    PipelinedSteps steps;
    steps.pieces = pieces_of(total, piece);
    steps.inside_before = [&](size_t k) {
      const size_t offset = k * piece;
      std::vector<char*> to(host_blocks.size());
      for (size_t q = 0; q < to.size(); ++q) to[q] = host_blocks[q] + offset;
      // In place (the input is this rank's block of the output), shm_gather_chunks skips that copy.
      shm_gather_chunks(engine, byte_ptr(input) + offset, length(k), to, kEveryRank);
    };
    steps.start_among_leaders = [&](size_t k) {
      const size_t offset = k * piece, len = length(k);
      LeaderWorks works;
      if (len == 0) return works;
      for (int g = 0; g < hosts_.hosts(); ++g) {
        if (g == me) continue;
        for (int r : mine) works.push_back(leaders_send(*leaders_, block_range(r, offset, len), g, piece_tag(k, n, r)));
        for (int r : hosts_.ranks_of_host[g]) {
          works.push_back(leaders_recv(*leaders_, block_range(r, offset, len), g, piece_tag(k, n, r)));
        }
      }
      return works;
    };
    steps.inside_after = [&](size_t k) {
      if (engine.local_size() == 1) return;  // nobody to pass the pieces on to
      for (int r : hosts_.host_order) {
        if (topology_.host_of_rank[r] != me) shm_broadcast_chunks(engine, block(r) + k * piece, length(k), 0);
      }
    };
    return run_pipelined(topology_, c, shm_describe(protocol(), c, total, total * n, -1), leaders_.get(), steps);
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_allgather_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders,
                                                       int64_t max_piece) {
  return std::make_unique<AllgatherHierarchical>(std::move(topology), std::move(leaders), max_piece);
}

}  // namespace fastcomm
