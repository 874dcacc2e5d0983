// allreduce_low_precision_shm_single_copy: the low-precision all_reduce
// (LowPrecisionWire, core/collective.h; the fp16/bf16 hooks' path) of an
// ordinary tensor among the ranks of one host, with single copy's steps
// (shm_single_copy.h): rank r reads slice r of every peer's tensor with
// process_vm_readv, piece by piece, and for each piece scales, clamps and
// rounds every rank's values to the wire dtype, sums them in float32 in rank
// order, rounds once and widens the sum into its own tensor
// (compress::low_precision_sum_cpu: the wire values never leave registers),
// then writes it into every peer's tensor with process_vm_writev.
//
//   exchange: where the tensors are (and the permission round, first op);
//   reduce and distribute: as above;
//   last round: each rank publishes how many of every rank's values it
//            clamped; nobody reads or writes a peer's tensor any more; each
//            rank adds up the clamps of its own values.
// Bit for bit the result of allreduce_low_precision_shm (same conversions,
// same rank-order sums), with the same per-rank clamp counts. Per rank it
// touches only its slice of each tensor (the segment path converts and widens
// the whole tensor on every rank): 1.5-2x faster from 64 KiB on 2 ranks
// (docs/compression.md). Where a rank is refused cross-memory access the
// group's first op runs the segment steps (allreduce_low_precision_shm.h) and
// later ones go to the segment path.
#include <cstring>
#include <memory>
#include <vector>

#include "algorithms/allreduce_low_precision_shm.h"
#include "algorithms/registry.h"
#include "algorithms/shm_single_copy.h"
#include "kernels/cpu/compress_cpu.h"

namespace fastcomm {

namespace {

class AllreduceLowPrecisionShmSingleCopy final : public ShmAlgorithm {
 public:
  AllreduceLowPrecisionShmSingleCopy(ShmTopology topology, int64_t min_bytes, int64_t async_min_bytes)
      : ShmAlgorithm(std::move(topology)), min_bytes_(min_bytes), async_min_bytes_(async_min_bytes) {}

  const char* name() const override {
    return "allreduce_low_precision_shm_single_copy";
  }

  bool accepts(const Collective& c) const override {
    if (min_bytes_ <= 0 || state_->refused()) return false;
    if (!c.wire || !topology_.single_host() || !shm_eligible(c)) return false;
    const shm::Engine& engine = *topology_.engine;
    if (engine.local_size() * sizeof(int64_t) > engine.slot_bytes()) return false;  // the clamp counts' round
    return static_cast<int64_t>(c.inputs[0].nbytes()) >= min_bytes_;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const LowPrecisionWire wire = *c.wire;
    const at::Tensor& t = c.inputs[0];
    const c10::ScalarType dtype = t.scalar_type();
    const int64_t count = t.numel();
    char* data = byte_ptr(t);
    // By value: the body may run on the op queue after launch returned, even after the group is gone.
    auto body = [state = state_, &engine, wire, dtype, count, data]() {
      const int64_t clamped = run(*state, engine, wire, dtype, data, count);
      if (wire.clamped.defined()) wire.clamped.data_ptr<int64_t>()[0] += clamped;  // only once it succeeded
    };
    // Peers compare the wire dtype (not the tensor's), as the segment path's.
    shm::OpDescriptor descriptor = shm_describe(c, t.nbytes(), t.nbytes(), -1);
    descriptor.dtype = static_cast<int16_t>(wire.dtype);
    return shm_run_sized(engine, c, descriptor, std::move(body), async_min_bytes_, t.nbytes());
  }

 private:
  // Returns how many of this rank's values were clamped.
  static int64_t run(SingleCopyState& state, shm::Engine& engine, const LowPrecisionWire& wire,
                     c10::ScalarType dtype, char* data, int64_t count) {
    const size_t element = c10::elementSize(dtype);
    const auto peers = state.exchange(engine, data, element);
    if (!peers) return run_allreduce_low_precision_segment(engine, wire, dtype, data, count);
    const int n = engine.local_size(), me = engine.local_rank();
    std::vector<int64_t> clamped(n, 0);  // of each rank's values, in my slice
    const auto reduce = [&](const void* const* sources, void* dst, int64_t len) {
      compress::low_precision_sum_cpu(sources, n, dtype, wire.dtype, wire.scale, wire.limit, dst, len,
                                      clamped.data());
    };
    state.reduce_and_distribute(engine, *peers, data, element, count, reduce);
    // The last round, in a use of its own (the exchange may have used two
    // rounds): nobody returns while a peer may still read or write its tensor.
    engine.start_use();
    std::memcpy(engine.my_slot(), clamped.data(), n * sizeof(int64_t));
    engine.round();
    int64_t mine = 0;
    for (int q = 0; q < n; ++q) {
      int64_t counted;
      std::memcpy(&counted, engine.slot_of(q) + me * sizeof(int64_t), sizeof(counted));
      mine += counted;
    }
    return mine;
  }

  int64_t min_bytes_, async_min_bytes_;
  std::shared_ptr<SingleCopyState> state_ = std::make_shared<SingleCopyState>();
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_low_precision_shm_single_copy(ShmTopology topology, int64_t min_bytes,
                                                                        int64_t async_min_bytes) {
  return std::make_unique<AllreduceLowPrecisionShmSingleCopy>(std::move(topology), min_bytes, async_min_bytes);
}

}  // namespace fastcomm
