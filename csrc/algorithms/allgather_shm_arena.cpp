// allgather_shm_arena: all_gather / all_gather_into_tensor among the ranks of
// one host whose inputs live in their arenas (transport/shm/arena.h; FSDP2's
// buffers with set_allocate_memory_from_process_group_for_comm(True), whose
// input is a view inside its own output). Peers' inputs are read in place.
//
//   round 1: each rank writes where its input lives; peers map those blocks;
//   gather:  each rank copies every peer's input straight into its place in
//            its output, and its own input too unless it is already there;
//   round 2: no rank returns (and lets its caller write its input) while a
//            peer may still read it.
// Per rank (P-1)*S read and written (S: input bytes), against allgather_shm's
// S into the slot and P*S out of the slots, one round per slot-sized chunk.
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/shm_arena_common.h"

namespace fastcomm {

namespace {

class AllgatherShmArena final : public ShmAlgorithm {
 public:
  AllgatherShmArena(ShmTopology topology, std::shared_ptr<shm::Arena> arena)
      : ShmAlgorithm(std::move(topology)), arena_(std::move(arena)) {}

  const char* name() const override {
    return "allgather_shm_arena";
  }

  bool accepts(const Collective& c) const override {
    if (!topology_.single_host() || !shm_eligible(c) || c.inputs.size() != 1) return false;
    const bool form = c.type == c10d::OpType::_ALLGATHER_BASE
                          ? c.outputs.size() == 1
                          : c.type == c10d::OpType::ALLGATHER && c.output_lists.size() == 1;
    return form && find_arena_tensor(*arena_, c.inputs[0].data_ptr(), c.inputs[0].nbytes()).has_value();
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const int n = engine.local_size(), me = engine.local_rank();
    char* input = byte_ptr(c.inputs[0]);
    const size_t bytes = c.inputs[0].nbytes();
    const ArenaTensorRef mine = *find_arena_tensor(*arena_, input, bytes);
    std::vector<char*> outputs(n);  // where rank q's input goes
    for (int q = 0; q < n; ++q) {
      outputs[q] =
          c.type == c10d::OpType::_ALLGATHER_BASE ? byte_ptr(c.outputs[0]) + q * bytes : byte_ptr(c.output_lists[0][q]);
    }
    return shm_run(engine, c, shm_describe(protocol(), c, bytes, bytes * n, shm::kRootArena), [&]() {
      const std::vector<char*> inputs = exchange_arena_tensors(engine, *arena_, mine, input, bytes);
      for (int q = 0; q < n; ++q) {
        if (q != me || outputs[q] != input) copy_bytes(outputs[q], inputs[q], bytes);
      }
      shm_empty_round(engine);  // nobody returns while a peer may still read its input
    });
  }

 private:
  std::shared_ptr<shm::Arena> arena_;
};

}  // namespace

std::unique_ptr<Algorithm> make_allgather_shm_arena(ShmTopology topology, std::shared_ptr<shm::Arena> arena) {
  return std::make_unique<AllgatherShmArena>(std::move(topology), std::move(arena));
}

}  // namespace fastcomm
