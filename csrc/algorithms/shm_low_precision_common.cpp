#include "algorithms/shm_low_precision_common.h"

#include <cstring>

namespace fastcomm {

LowPrecisionOp low_precision_op(const Collective& c) {
  const at::Tensor& t = c.inputs[0];
  return {*c.wire, t.scalar_type(), byte_ptr(t), t.numel(), t.nbytes()};
}

shm::OpDescriptor low_precision_describe(uint16_t algorithm, const Collective& c, const LowPrecisionOp& op, int root) {
  shm::OpDescriptor descriptor = shm_describe(algorithm, c, op.bytes, op.bytes, root);
  descriptor.dtype = static_cast<int16_t>(op.wire.dtype);
  return descriptor;
}

void add_clamps(const LowPrecisionWire& wire, int64_t clamped) {
  if (wire.clamped.defined()) wire.clamped.data_ptr<int64_t>()[0] += clamped;
}

bool clamp_counts_fit(const shm::Engine& engine, size_t offset) {
  return offset + engine.local_size() * sizeof(int64_t) <= engine.slot_bytes();
}

int64_t exchange_clamp_counts(shm::Engine& engine, const std::vector<int64_t>& counted, size_t offset) {
  const int n = engine.local_size(), me = engine.local_rank();
  std::memcpy(engine.my_slot() + offset, counted.data(), n * sizeof(int64_t));
  engine.round();
  int64_t mine = 0;
  for (int q = 0; q < n; ++q) {
    int64_t theirs;
    std::memcpy(&theirs, engine.slot_of(q) + offset + me * sizeof(int64_t), sizeof(theirs));
    mine += theirs;
  }
  return mine;
}

}  // namespace fastcomm
