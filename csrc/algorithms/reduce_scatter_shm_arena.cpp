// reduce_scatter_shm_arena: reduce_scatter_tensor among the ranks of one host
// whose inputs live in their arenas (transport/shm/arena.h; FSDP2's buffers
// with set_allocate_memory_from_process_group_for_comm(True)). Peers' inputs
// are read in place.
//
//   round 1: each rank writes where its input lives; peers map those blocks;
//   reduce:  rank r reduces block r of every rank's input, in rank order, into
//            its output (bitwise the same as any rank would compute);
//   round 2: no rank returns (and lets its caller write its input) while a
//            peer may still read it.
// Per rank P*B read and B written (B: output bytes), against reduce_scatter_shm's
// (P-1)*B more written into the slots, one round per piece.
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/shm_arena_common.h"
#include "kernels/cpu/reduce.h"

namespace fastcomm {

namespace {

class ReduceScatterShmArena final : public ShmAlgorithm {
 public:
  ReduceScatterShmArena(ShmTopology topology, std::shared_ptr<shm::Arena> arena)
      : ShmAlgorithm(std::move(topology)), arena_(std::move(arena)) {}

  const char* name() const override {
    return "reduce_scatter_shm_arena";
  }

  bool accepts(const Collective& c) const override {
    if (!topology_.single_host() || !shm_eligible(c) || c.type != c10d::OpType::_REDUCE_SCATTER_BASE) return false;
    if (c.inputs.size() != 1 || c.outputs.size() != 1) return false;
    if (!cpu_kernel_reduction(c.reduce_op, c.outputs[0].scalar_type())) return false;
    return find_arena_tensor(*arena_, c.inputs[0].data_ptr(), c.inputs[0].nbytes()).has_value();
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const int n = engine.local_size(), me = engine.local_rank();
    const at::Tensor& output = c.outputs[0];
    const auto dtype = output.scalar_type();
    const auto kind = *cpu_kernel_reduction(c.reduce_op, dtype);
    const size_t block = output.nbytes(), element = output.element_size();
    char* input = byte_ptr(c.inputs[0]);
    const ArenaTensorRef mine = *find_arena_tensor(*arena_, input, block * n);
    return shm_run(engine, c, shm_describe(protocol(), c, block * n, block, shm::kRootArena), [&]() {
      const std::vector<char*> inputs = exchange_arena_tensors(engine, *arena_, mine, input, block * n);
      std::vector<const void*> sources(n);
      for (int q = 0; q < n; ++q) sources[q] = inputs[q] + me * block;
      kernels::reduce(dtype, kind, sources.data(), n, byte_ptr(output), static_cast<int64_t>(block / element));
      shm_empty_round(engine);  // nobody returns while a peer may still read its input
    });
  }

 private:
  std::shared_ptr<shm::Arena> arena_;
};

}  // namespace

std::unique_ptr<Algorithm> make_reduce_scatter_shm_arena(ShmTopology topology, std::shared_ptr<shm::Arena> arena) {
  return std::make_unique<ReduceScatterShmArena>(std::move(topology), std::move(arena));
}

}  // namespace fastcomm
