// broadcast_shm: broadcast among the ranks of one host.
//
// Per chunk of at most one slot: the root copies the chunk into its slot, one
// round, every other rank copies it out (S written by the root, S read and
// written by each other rank; the P-1 readers copy in parallel).
#include "algorithms/registry.h"
#include "algorithms/shm_blocks.h"
#include "algorithms/shm_common.h"

namespace fastcomm {

namespace {

class BroadcastShm final : public ShmAlgorithm {
 public:
  using ShmAlgorithm::ShmAlgorithm;

  const char* name() const override {
    return "broadcast_shm";
  }

  bool accepts(const Collective& c) const override {
    return c.type == c10d::OpType::BROADCAST && topology_.single_host() && shm_eligible(c) && c.inputs.size() == 1;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const at::Tensor& t = c.inputs[0];
    const size_t total = t.nbytes();
    const int root = static_cast<int>(c.peer);
    return shm_run(engine, c, shm_describe(protocol(), c, total, total, root),
                   [&]() { shm_broadcast_chunks(engine, byte_ptr(t), total, root); });
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_broadcast_shm(ShmTopology topology) {
  return std::make_unique<BroadcastShm>(std::move(topology));
}

}  // namespace fastcomm
