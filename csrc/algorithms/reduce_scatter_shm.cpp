// reduce_scatter_shm: reduce_scatter / reduce_scatter_tensor among the ranks
// of one host.
//
// Each rank's slot is cut into P pieces of slot/P bytes. Per round every rank
// copies the next piece of each of the P-1 blocks it does not keep into piece
// q of its slot ((P-1)/P of a slot written), then rank r reduces piece r of
// every slot (its own block read straight from its input) into its output, in
// rank order (bitwise the same on every rank). Output bytes per rank: B; bytes
// written into the segment per rank: (P-1)*B; read: P*B.
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/shm_common.h"
#include "kernels/cpu/reduce.h"

namespace fastcomm {

namespace {

class ReduceScatterShm final : public ShmAlgorithm {
 public:
  using ShmAlgorithm::ShmAlgorithm;

  const char* name() const override {
    return "reduce_scatter_shm";
  }

  bool accepts(const Collective& c) const override {
    if (!topology_.single_host() || !shm_eligible(c) || c.outputs.size() != 1) return false;
    if (topology_.engine->local_size() * size_t{64} > topology_.engine->slot_bytes()) return false;  // pieces >= 64 B
    if (!cpu_kernel_reduction(c.reduce_op, c.outputs[0].scalar_type())) return false;
    if (c.type == c10d::OpType::_REDUCE_SCATTER_BASE) return c.inputs.size() == 1;
    return c.type == c10d::OpType::REDUCE_SCATTER && c.input_lists.size() == 1;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const int n = engine.local_size(), me = engine.local_rank();
    const at::Tensor& output = c.outputs[0];
    const auto dtype = output.scalar_type();
    const auto kind = *cpu_kernel_reduction(c.reduce_op, dtype);
    const size_t total = output.nbytes(), element = output.element_size();
    std::vector<const char*> blocks(n);  // the block of this rank's input that rank q keeps
    for (int q = 0; q < n; ++q) {
      blocks[q] = c.type == c10d::OpType::_REDUCE_SCATTER_BASE ? byte_ptr(c.inputs[0]) + q * total
                                                               : byte_ptr(c.input_lists[0][q]);
    }
    return shm_run(engine, c, shm_describe(protocol(), c, total * n, total, -1), [&]() {
      const size_t piece = std::max(element, engine.slot_bytes() / n / 64 * 64 / element * element);
      std::vector<const void*> sources(n);
      char* out = byte_ptr(output);
      size_t offset = 0;
      do {
        const size_t len = std::min(piece, total - offset);
        engine.start_use();
        for (int q = 0; q < n; ++q) {
          if (q != me) copy_bytes(engine.my_slot() + q * piece, blocks[q] + offset, len);
        }
        engine.round();
        for (int r = 0; r < n; ++r) sources[r] = r == me ? blocks[me] + offset : engine.slot_of(r) + me * piece;
        kernels::reduce(dtype, kind, sources.data(), n, out + offset, static_cast<int64_t>(len / element));
        offset += len;
      } while (offset < total);
    });
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_reduce_scatter_shm(ShmTopology topology) {
  return std::make_unique<ReduceScatterShm>(std::move(topology));
}

}  // namespace fastcomm
