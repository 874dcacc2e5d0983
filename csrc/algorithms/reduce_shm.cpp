// reduce_shm: reduce to a root among the ranks of one host.
//
// Per chunk of at most one slot: every rank copies its chunk into its slot,
// one round, the root reduces all P slots in rank order into its tensor (each
// rank writes S; the root reads P*S). Other ranks' tensors are left unchanged,
// as Gloo and NCCL leave them.
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/shm_common.h"

namespace fastcomm {

namespace {

class ReduceShm final : public Algorithm {
 public:
  explicit ReduceShm(ShmTopology topology) : topology_(std::move(topology)) {}

  const char* name() const override {
    return "reduce_shm";
  }

  bool accepts(const Collective& c) const override {
    if (c.type != c10d::OpType::REDUCE || !topology_.single_host() || !shm_eligible(c)) return false;
    return c.inputs.size() == 1 && shm_reduce_kind(c.reduce_op, c.inputs[0].scalar_type()).has_value();
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const at::Tensor& t = c.inputs[0];
    const auto dtype = t.scalar_type();
    const auto kind = *shm_reduce_kind(c.reduce_op, dtype);
    const size_t total = t.nbytes(), element = t.element_size();
    const int root = static_cast<int>(c.peer);
    return shm_run(engine, c, shm_describe(c, total, total, root), [&]() {
      const int n = engine.local_size();
      const size_t chunk = engine.slot_bytes() / element * element;
      std::vector<const void*> slots(n);
      char* data = byte_ptr(t);
      size_t offset = 0;
      do {
        const size_t len = std::min(chunk, total - offset);
        engine.start_use();
        copy_bytes(engine.my_slot(), data + offset, len);
        engine.round();
        if (engine.local_rank() == root) {
          for (int r = 0; r < n; ++r) slots[r] = engine.slot_of(r);
          kernels::reduce(dtype, kind, slots.data(), n, data + offset, static_cast<int64_t>(len / element));
        }
        offset += len;
      } while (offset < total);
    });
  }

 private:
  ShmTopology topology_;
};

}  // namespace

std::unique_ptr<Algorithm> make_reduce_shm(ShmTopology topology) {
  return std::make_unique<ReduceShm>(std::move(topology));
}

}  // namespace fastcomm
