// reduce_scatter_hierarchical: reduce_scatter / reduce_scatter_tensor over
// several hosts, pipelined.
//
// Rank r keeps block r (B bytes) of the reduction of everyone's N blocks.
// Blocks are cut into pieces of at most slot/N bytes; per piece k, in
// run_pipelined's frame (hierarchical.h):
//   before(k): inside each host every rank writes piece k of all N blocks
//              into its slot, in host order, one round, the leader reduces the
//              P slots (local rank order) into its host's partial of the piece;
//   leaders:   each leader sends every other host g the partial of g's blocks
//              (P_g pieces) and receives the other hosts' partials of its own
//              host's blocks, not waited for (Gloo send/recv, any host sizes);
//   after(k):  the leader reduces the H partials of its host's blocks in host
//              order into its slot, one round, each local rank copies its piece.
// Each result is computed once, by its host's leader. Network bytes per
// leader: sends (N-P)*B, receives (H-1)*P*B; Gloo's ring moves (N-1)*B
// through every rank's link.
#include <vector>

#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"
#include "kernels/cpu/reduce.h"

namespace fastcomm {

namespace {

class ReduceScatterHierarchical final : public ShmAlgorithm {
 public:
  ReduceScatterHierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders)
      : ShmAlgorithm(std::move(topology)), leaders_(std::move(leaders)), hosts_(topology_) {}

  const char* name() const override {
    return "reduce_scatter_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (!topology_.hierarchical() || (topology_.leads_host() && !leaders_)) return false;
    if (!shm_eligible(c) || c.outputs.size() != 1) return false;
    if (!cpu_kernel_reduction(c.reduce_op, c.outputs[0].scalar_type())) return false;
    if (c.type == c10d::OpType::_REDUCE_SCATTER_BASE) return c.inputs.size() == 1;
    return c.type == c10d::OpType::REDUCE_SCATTER && c.input_lists.size() == 1;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const int n = topology_.group_size, me = hosts_.my_host, hosts = hosts_.hosts();
    const int local_size = engine.local_size();
    const at::Tensor& output = c.outputs[0];
    const auto dtype = output.scalar_type();
    const auto kind = *cpu_kernel_reduction(c.reduce_op, dtype);
    const size_t total = output.nbytes(), element = output.element_size();
    const bool base = c.type == c10d::OpType::_REDUCE_SCATTER_BASE;
    auto block = [&](int r) { return base ? byte_ptr(c.inputs[0]) + r * total : byte_ptr(c.input_lists[0][r]); };
    const size_t piece = pipeline_piece_bytes(total, engine.slot_bytes() / n, element);
    auto length = [&](size_t k) { return std::min(piece, total - k * piece); };
    auto count = [&](size_t bytes) { return static_cast<int64_t>(bytes / element); };

    // The leader's buffers, two of each: piece k+1 is reduced while piece k's are on the wire.
    at::Tensor partial, received;  // [2][N pieces in host order], [2][H-1][P pieces]
    if (topology_.leads_host()) {
      const auto bytes = at::TensorOptions().dtype(at::kByte);
      partial = at::empty({2, static_cast<int64_t>(n * piece)}, bytes);
      received = at::empty({2, static_cast<int64_t>((hosts - 1) * local_size * piece)}, bytes);
    }
    // Host g's slice of `buffer` (a piece of its blocks, len bytes each): its index among the other hosts.
    auto other_index = [&](int g) { return g < me ? g : g - 1; };

    PipelinedSteps steps;
    steps.pieces = pieces_of(total, piece);
    steps.inside_before = [&](size_t k) {
      const size_t offset = k * piece, len = length(k);
      engine.start_use();
      for (int j = 0; j < n; ++j) copy_bytes(engine.my_slot() + j * len, block(hosts_.host_order[j]) + offset, len);
      engine.round();
      if (!topology_.leads_host()) return;
      std::vector<const void*> slots(local_size);
      for (int q = 0; q < local_size; ++q) slots[q] = engine.slot_of(q);
      kernels::reduce(dtype, kind, slots.data(), local_size, partial[k % 2].data_ptr(), count(n * len));
    };
    steps.start_among_leaders = [&](size_t k) {
      const size_t len = length(k);
      LeaderWorks works;
      if (len == 0) return works;
      const at::Tensor& mine = partial[k % 2];
      const at::Tensor& theirs = received[k % 2];
      const size_t host_bytes = local_size * len;
      for (int g = 0; g < hosts; ++g) {
        if (g == me) continue;
        const size_t g_bytes = hosts_.size_of(g) * len;
        works.push_back(leaders_send(*leaders_, byte_range(mine, hosts_.first_of_host[g] * len, g_bytes), g,
                                     static_cast<int>(k)));
        works.push_back(leaders_recv(*leaders_, byte_range(theirs, other_index(g) * host_bytes, host_bytes), g,
                                     static_cast<int>(k)));
      }
      return works;
    };
    steps.inside_after = [&](size_t k) {
      const size_t offset = k * piece, len = length(k);
      engine.start_use();
      if (topology_.leads_host()) {
        const size_t host_bytes = local_size * len;
        std::vector<const void*> partials(hosts);
        for (int g = 0; g < hosts; ++g) {
          partials[g] = g == me ? byte_ptr(partial[k % 2]) + hosts_.first_of_host[me] * len
                                : byte_ptr(received[k % 2]) + other_index(g) * host_bytes;
        }
        kernels::reduce(dtype, kind, partials.data(), hosts, engine.my_slot(), count(host_bytes));
      }
      engine.round();
      copy_bytes(byte_ptr(output) + offset, engine.slot_of(0) + engine.local_rank() * len, len);
    };
    return run_pipelined(topology_, c, shm_describe(c, total * n, total, -1), steps);
  }

 private:
  c10::intrusive_ptr<c10d::Backend> leaders_;
  HostLayout hosts_;
};

}  // namespace

std::unique_ptr<Algorithm> make_reduce_scatter_hierarchical(ShmTopology topology,
                                                            c10::intrusive_ptr<c10d::Backend> leaders) {
  return std::make_unique<ReduceScatterHierarchical>(std::move(topology), std::move(leaders));
}

}  // namespace fastcomm
