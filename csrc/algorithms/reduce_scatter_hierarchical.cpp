// reduce_scatter_hierarchical: reduce_scatter / reduce_scatter_tensor over
// several hosts, pipelined.
//
// Rank r keeps block r (B bytes) of the reduction of everyone's N blocks.
// Blocks are cut into pieces of FASTCOMM_PIPELINE_PIECE_BYTES / N (a piece of
// the whole input); per piece k, in run_pipelined's frame (hierarchical.h):
//   before(k): inside each host, slot by slot, every rank writes its part of
//              piece k of all N blocks into its slot, in host order, one
//              round, the leader reduces the P slots (local rank order) into
//              its host's partial of the piece;
//   leaders:   each leader sends every other host g the partial of g's blocks
//              (P_g pieces) and receives the other hosts' partials of its own
//              host's blocks, not waited for (Gloo send/recv, any host sizes);
//   after(k):  slot by slot, the leader reduces the H partials of its host's
//              blocks in host order into its slot, one round, each local rank
//              copies its part.
// Each result is computed once, by its host's leader. Network bytes per
// leader: sends (N-P)*B, receives (H-1)*P*B; Gloo's ring moves (N-1)*B
// through every rank's link.
#include <vector>

#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"
#include "kernels/cpu/reduce.h"

namespace fastcomm {

namespace {

class ReduceScatterHierarchical final : public HierarchicalAlgorithm {
 public:
  using HierarchicalAlgorithm::HierarchicalAlgorithm;

  const char* name() const override {
    return "reduce_scatter_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (!runs_here()) return false;
    if (!shm_eligible(c) || c.outputs.size() != 1) return false;
    if (!cpu_kernel_reduction(c.reduce_op, c.outputs[0].scalar_type())) return false;
    if (c.type == c10d::OpType::_REDUCE_SCATTER_BASE) return c.inputs.size() == 1;
    return c.type == c10d::OpType::REDUCE_SCATTER && c.input_lists.size() == 1;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const int n = topology_.group_size, me = hosts_.my_host, hosts = hosts_.hosts();
    const int local_size = engine.local_size();
    const bool leads = topology_.leads_host();
    const at::Tensor& output = c.outputs[0];
    const auto dtype = output.scalar_type();
    const auto kind = *cpu_kernel_reduction(c.reduce_op, dtype);
    const size_t total = output.nbytes(), element = output.element_size();
    const bool base = c.type == c10d::OpType::_REDUCE_SCATTER_BASE;
    auto block = [&](int r) { return base ? byte_ptr(c.inputs[0]) + r * total : byte_ptr(c.input_lists[0][r]); };
    // A piece is cut from the whole input (N blocks), so the leader's buffers stay within 4 pieces' bytes.
    const size_t piece = pipeline_piece_bytes(max_piece_, element, total, n);
    auto length = [&](size_t k) { return std::min(piece, total - k * piece); };
    auto count = [&](size_t bytes) { return static_cast<int64_t>(bytes / element); };
    // Bytes per block per round: N blocks fit one slot before, P blocks after.
    auto per_round = [&](int blocks) { return std::max(element, engine.slot_bytes() / blocks / element * element); };

    // The leader's buffers, two of each: piece k+1 is reduced while piece k's
    // are on the wire. partial[i]: the host's sum of piece k of all N blocks
    // (host order, `len` apart); received[i]: the other hosts' partials of
    // this host's P blocks (host g's at other_index(g) * P * len).
    at::Tensor partial, received;
    if (leads) {
      const auto bytes = at::TensorOptions().dtype(at::kByte);
      partial = at::empty({2, static_cast<int64_t>(n * piece)}, bytes);
      received = at::empty({2, static_cast<int64_t>((hosts - 1) * local_size * piece)}, bytes);
    }
    auto other_index = [&](int g) { return g < me ? g : g - 1; };

    PipelinedSteps steps;
    steps.pieces = pieces_of(total, piece);
    steps.inside_before = [&](size_t k) {
      const size_t offset = k * piece, len = length(k);
      char* sums = leads ? byte_ptr(partial[k % 2]) : nullptr;
      std::vector<const void*> slots(local_size);
      for_each_chunk(len, per_round(n), [&](size_t at, size_t part) {
        engine.start_use();
        for (int j = 0; j < n; ++j)
          copy_bytes(engine.my_slot() + j * part, block(hosts_.host_order[j]) + offset + at, part);
        engine.round();
        if (!leads) return;
        for (int j = 0; j < n; ++j) {
          for (int q = 0; q < local_size; ++q) slots[q] = engine.slot_of(q) + j * part;
          kernels::reduce(dtype, kind, slots.data(), local_size, sums + j * len + at, count(part));
        }
      });
    };
    steps.start_among_leaders = [&](size_t k) {
      const size_t len = length(k);
      LeaderWorks works;
      if (len == 0) return works;
      const at::Tensor sums = partial[k % 2], theirs = received[k % 2];
      const size_t host_bytes = local_size * len;
      for (int g = 0; g < hosts; ++g) {
        if (g == me) continue;
        const size_t g_bytes = hosts_.size_of(g) * len;
        works.push_back(
            leaders_send(*leaders_, byte_range(sums, hosts_.first_of_host[g] * len, g_bytes), g, static_cast<int>(k)));
        works.push_back(leaders_recv(*leaders_, byte_range(theirs, other_index(g) * host_bytes, host_bytes), g,
                                     static_cast<int>(k)));
      }
      return works;
    };
    steps.inside_after = [&](size_t k) {
      const size_t offset = k * piece, len = length(k);
      std::vector<const void*> partials(hosts);
      for_each_chunk(len, per_round(local_size), [&](size_t at, size_t part) {
        engine.start_use();
        if (leads) {
          for (int q = 0; q < local_size; ++q) {  // host g's partial of local rank q's block, in host order
            for (int g = 0; g < hosts; ++g) {
              partials[g] = g == me ? byte_ptr(partial[k % 2]) + (hosts_.first_of_host[me] + q) * len + at
                                    : byte_ptr(received[k % 2]) + (other_index(g) * local_size + q) * len + at;
            }
            kernels::reduce(dtype, kind, partials.data(), hosts, engine.my_slot() + q * part, count(part));
          }
        }
        engine.round();
        copy_bytes(byte_ptr(output) + offset + at, engine.slot_of(0) + engine.local_rank() * part, part);
      });
    };
    return run_pipelined(topology_, c, shm_describe(protocol(), c, total * n, total, -1), leaders_.get(), steps);
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_reduce_scatter_hierarchical(ShmTopology topology,
                                                            c10::intrusive_ptr<c10d::Backend> leaders,
                                                            int64_t max_piece) {
  return std::make_unique<ReduceScatterHierarchical>(std::move(topology), std::move(leaders), max_piece);
}

}  // namespace fastcomm
