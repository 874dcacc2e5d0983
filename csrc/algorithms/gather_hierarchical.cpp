// gather_hierarchical: gather to a root over several hosts, pipelined.
//
// Each rank's input (B bytes) is cut into pieces of FASTCOMM_PIPELINE_PIECE_BYTES
// / N (a piece of the root's whole output); per piece k, in run_pipelined's
// frame (hierarchical.h), for a root on host R:
//   before(k): inside each host every rank writes its piece, one round; on
//              host R the root copies its host's P pieces into its outputs,
//              on other hosts the leader copies them into a buffer;
//   leaders:   every other host's leader sends its P pieces to host R's
//              leader, which receives them (into the root's outputs when it is
//              the root), not waited for (Gloo send/recv);
//   after(k):  on host R, when the root is not its leader, the leader passes
//              the other hosts' pieces to the root through its slot.
// Network: each other host's leader sends P*B; host R's leader receives (N-P_R)*B.
#include <vector>

#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"

namespace fastcomm {

namespace {

class GatherHierarchical final : public HierarchicalAlgorithm {
 public:
  using HierarchicalAlgorithm::HierarchicalAlgorithm;

  const char* name() const override {
    return "gather_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (!runs_here()) return false;
    return c.type == c10d::OpType::GATHER && shm_eligible(c) && c.inputs.size() == 1;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const int n = topology_.group_size, me = hosts_.my_host, local_size = engine.local_size();
    const RootPlacement root = place_root(static_cast<int>(c.peer));
    const bool leads = topology_.leads_host(), leader_is_root = leads && root.is_root;
    const at::Tensor& input = c.inputs[0];
    const size_t total = input.nbytes(), element = input.element_size();
    const std::vector<int>& mine = hosts_.ranks_of_host[me];
    auto output = [&](int r) { return byte_ptr(c.output_lists[0][r]); };  // the root's only
    const size_t piece = pipeline_piece_bytes(max_piece_, element, total, n);
    auto length = [&](size_t k) { return std::min(piece, total - k * piece); };
    const at::Tensor buffer = relay_buffer(root, piece, input.options());
    auto buffered = [&](size_t k, int index, size_t len) { return byte_range(buffer[k % 2], index * len, len); };

    PipelinedSteps steps;
    steps.pieces = pieces_of(total, piece);
    steps.inside_before = [&](size_t k) {
      const size_t offset = k * piece, len = length(k);
      std::vector<char*> to(local_size);
      for (int q = 0; q < local_size; ++q) {
        to[q] = root.on_root_host ? (root.is_root ? output(mine[q]) + offset : nullptr)
                                  : (leads ? byte_ptr(buffered(k, q, len)) : nullptr);
      }
      const int receiver = root.on_root_host ? root.local_root : 0;
      shm_gather_chunks(engine, byte_ptr(input) + offset, len, to, receiver);
    };
    steps.start_among_leaders = [&](size_t k) {
      const size_t offset = k * piece, len = length(k);
      LeaderWorks works;
      if (len == 0) return works;
      if (!root.on_root_host) {
        for (int q = 0; q < local_size; ++q) {
          works.push_back(leaders_send(*leaders_, buffered(k, q, len), root.host, piece_tag(k, n, mine[q])));
        }
        return works;
      }
      int index = 0;
      for (int r : hosts_.host_order) {
        const int g = topology_.host_of_rank[r];
        if (g == me) continue;
        const at::Tensor into =
            leader_is_root ? byte_range(c.output_lists[0][r], offset, len) : buffered(k, index, len);
        works.push_back(leaders_recv(*leaders_, into, g, piece_tag(k, n, r)));
        ++index;
      }
      return works;
    };
    steps.inside_after = [&](size_t k) {
      if (!root.on_root_host || leader_is_root || root.local_root == 0) return;
      const size_t offset = k * piece, len = length(k);
      int index = 0;
      for (int r : hosts_.host_order) {
        if (topology_.host_of_rank[r] == me) continue;
        shm_pass_chunks(engine, leads ? byte_ptr(buffered(k, index, len)) : nullptr,
                        root.is_root ? output(r) + offset : nullptr, len, 0, root.local_root);
        ++index;
      }
    };
    return run_pipelined(topology_, c, shm_describe(protocol(), c, total, total * n, root.local_root), leaders_.get(),
                         steps);
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_gather_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders,
                                                    int64_t max_piece) {
  return std::make_unique<GatherHierarchical>(std::move(topology), std::move(leaders), max_piece);
}

}  // namespace fastcomm
