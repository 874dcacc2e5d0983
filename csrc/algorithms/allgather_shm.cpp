// allgather_shm: all_gather / all_gather_into_tensor among the ranks of one host.
//
// Per chunk of at most one slot of each rank's input: every rank copies its
// chunk into its slot, one round, every rank copies all P chunks to their
// places in its output (S written, then P*S read and written per rank).
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"
#include "algorithms/shm_common.h"

namespace fastcomm {

namespace {

class AllgatherShm final : public ShmAlgorithm {
 public:
  using ShmAlgorithm::ShmAlgorithm;

  const char* name() const override {
    return "allgather_shm";
  }

  bool accepts(const Collective& c) const override {
    if (!topology_.single_host() || !shm_eligible(c) || c.inputs.size() != 1) return false;
    if (c.type == c10d::OpType::_ALLGATHER_BASE) return c.outputs.size() == 1;
    return c.type == c10d::OpType::ALLGATHER && c.output_lists.size() == 1;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const int n = engine.local_size();
    const at::Tensor& input = c.inputs[0];
    const size_t total = input.nbytes();
    std::vector<char*> outputs(n);  // where rank r's bytes go
    for (int r = 0; r < n; ++r) {
      outputs[r] =
          c.type == c10d::OpType::_ALLGATHER_BASE ? byte_ptr(c.outputs[0]) + r * total : byte_ptr(c.output_lists[0][r]);
    }
    return shm_run(engine, c, shm_describe(protocol(), c, total, total * n, -1),
                   [&]() { shm_gather_chunks(engine, byte_ptr(input), total, outputs, kEveryRank); });
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_allgather_shm(ShmTopology topology) {
  return std::make_unique<AllgatherShm>(std::move(topology));
}

}  // namespace fastcomm
