// scatter_hierarchical: scatter from a root over several hosts, pipelined.
//
// Each rank's output (B bytes) is cut into pieces of FASTCOMM_PIPELINE_PIECE_BYTES
// / N (a piece of the root's whole input); per piece k, in run_pipelined's frame
// (hierarchical.h), for a root on host R:
//   before(k): on host R, the root hands its host's ranks their pieces through
//              its slot and, when it is not the leader, passes the other
//              hosts' pieces to the leader;
//   leaders:   host R's leader sends every other host's leader its ranks' P
//              pieces, which that leader receives into a buffer, not waited
//              for (Gloo send/recv);
//   after(k):  on the other hosts the leader hands its ranks their pieces
//              through its slot.
// Network: host R's leader sends (N-P_R)*B; each other host's leader receives P*B.
#include <vector>

#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"

namespace fastcomm {

namespace {

class ScatterHierarchical final : public HierarchicalAlgorithm {
 public:
  using HierarchicalAlgorithm::HierarchicalAlgorithm;

  const char* name() const override {
    return "scatter_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (!runs_here()) return false;
    return c.type == c10d::OpType::SCATTER && shm_eligible(c) && c.outputs.size() == 1;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const int n = topology_.group_size, me = hosts_.my_host, local_size = engine.local_size();
    const RootPlacement root = place_root(static_cast<int>(c.peer));
    const bool leads = topology_.leads_host(), leader_is_root = leads && root.is_root;
    const at::Tensor& output = c.outputs[0];
    const size_t total = output.nbytes(), element = output.element_size();
    const std::vector<int>& mine = hosts_.ranks_of_host[me];
    auto input = [&](int r) { return byte_ptr(c.input_lists[0][r]); };  // the root's only
    const size_t piece = pipeline_piece_bytes(max_piece_, element, total, n);
    auto length = [&](size_t k) { return std::min(piece, total - k * piece); };
    const at::Tensor buffer = relay_buffer(root, piece, output.options());
    auto buffered = [&](size_t k, int index, size_t len) { return byte_range(buffer[k % 2], index * len, len); };

    PipelinedSteps steps;
    steps.pieces = pieces_of(total, piece);
    steps.inside_before = [&](size_t k) {
      if (!root.on_root_host) return;
      const size_t offset = k * piece, len = length(k);
      std::vector<const char*> from(local_size, nullptr);
      if (root.is_root) {
        for (int q = 0; q < local_size; ++q) from[q] = input(mine[q]) + offset;
      }
      shm_scatter_chunks(engine, from, byte_ptr(output) + offset, len, element, root.local_root);
      if (root.local_root == 0) return;  // the root leads: it sends straight from its inputs
      int index = 0;
      for (int r : hosts_.host_order) {
        if (topology_.host_of_rank[r] == me) continue;
        shm_pass_chunks(engine, root.is_root ? input(r) + offset : nullptr,
                        leads ? byte_ptr(buffered(k, index, len)) : nullptr, len, root.local_root, 0);
        ++index;
      }
    };
    steps.start_among_leaders = [&](size_t k) {
      const size_t offset = k * piece, len = length(k);
      LeaderWorks works;
      if (len == 0) return works;
      if (!root.on_root_host) {
        for (int q = 0; q < local_size; ++q) {
          works.push_back(leaders_recv(*leaders_, buffered(k, q, len), root.host, piece_tag(k, n, mine[q])));
        }
        return works;
      }
      int index = 0;
      for (int r : hosts_.host_order) {
        const int g = topology_.host_of_rank[r];
        if (g == me) continue;
        const at::Tensor from = leader_is_root ? byte_range(c.input_lists[0][r], offset, len) : buffered(k, index, len);
        works.push_back(leaders_send(*leaders_, from, g, piece_tag(k, n, r)));
        ++index;
      }
      return works;
    };
    steps.inside_after = [&](size_t k) {
      if (root.on_root_host) return;
      const size_t offset = k * piece, len = length(k);
      std::vector<const char*> from(local_size, nullptr);
      if (leads) {
        for (int q = 0; q < local_size; ++q) from[q] = byte_ptr(buffered(k, q, len));
      }
      shm_scatter_chunks(engine, from, byte_ptr(output) + offset, len, element, 0);
    };
    return run_pipelined(topology_, c, shm_describe(protocol(), c, total * n, total, root.local_root), leaders_.get(),
                         steps);
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_scatter_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders,
                                                     int64_t max_piece) {
  return std::make_unique<ScatterHierarchical>(std::move(topology), std::move(leaders), max_piece);
}

}  // namespace fastcomm
