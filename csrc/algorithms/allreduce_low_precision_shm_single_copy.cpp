// allreduce_low_precision_shm_single_copy: the low-precision all_reduce
// (LowPrecisionWire, core/collective.h; the fp16/bf16 hooks' path) of an
// ordinary tensor among the ranks of one host, with single copy's steps
// (shm_single_copy.h): rank r reads slice r of every peer's tensor (then the
// pieces of other slices nobody claimed) with process_vm_readv, piece by
// piece, and for each piece scales, clamps and rounds every rank's values to
// the wire dtype, sums them in float32 in rank order, rounds once and widens
// the sum into its own tensor (compress::low_precision_sum_cpu: the wire
// values never leave registers), then writes it into every peer's tensor with
// process_vm_writev.
//
//   exchange: where the tensors are (and the permission round, first op);
//   reduce and distribute: as above;
//   last round: each rank publishes how many of every rank's values it
//            clamped; nobody reads or writes a peer's tensor any more; each
//            rank adds up the clamps of its own values.
// Bit for bit the result of allreduce_low_precision_shm (same conversions,
// same rank-order sums), with the same per-rank clamp counts. Per rank it
// touches only its slice of each tensor and the pieces it takes over (the
// segment path converts and widens the whole tensor on every rank);
// benchmarks/arena_vs_ordinary.py --collective all_reduce_fp16 measures both
// (docs/compression.md). Where a rank is refused
// cross-memory access the group's first op runs the segment steps
// (allreduce_low_precision_shm.h) and later ones go to the segment path.
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
  AllreduceLowPrecisionShmSingleCopy(ShmTopology topology, int64_t min_bytes, int64_t huge_pages_min_bytes,
                                     int64_t async_min_bytes)
      : ShmAlgorithm(std::move(topology)),
        min_bytes_(min_bytes),
        async_min_bytes_(async_min_bytes),
        state_(std::make_shared<SingleCopyState>(huge_pages_min_bytes)) {}

  const char* name() const override {
    return "allreduce_low_precision_shm_single_copy";
  }

  bool accepts(const Collective& c) const override {
    if (min_bytes_ <= 0 || state_->refused()) return false;
    if (!c.wire || !topology_.single_host() || !shm_eligible(c)) return false;
    if (!clamp_counts_fit(*topology_.engine, 0)) return false;  // the last round's
    return static_cast<int64_t>(c.inputs[0].nbytes()) >= min_bytes_;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const LowPrecisionOp op = low_precision_op(c);
    // By value: the body may run on the op queue after launch returned, even after the group is gone.
    auto body = [state = state_, &engine, op]() { add_clamps(op.wire, run(*state, engine, op)); };
    return shm_run_sized(engine, c, low_precision_describe(protocol(), c, op, -1), std::move(body), async_min_bytes_,
                         op.bytes);
  }

 private:
  // Returns how many of this rank's values were clamped.
  static int64_t run(SingleCopyState& state, shm::Engine& engine, const LowPrecisionOp& op) {
    const size_t element = c10::elementSize(op.dtype);
    const auto peers = state.exchange(engine, op.data, op.bytes, element);
    if (!peers) return run_allreduce_low_precision_segment(engine, op);
    const int n = engine.local_size();
    std::vector<int64_t> clamped(n, 0);  // of each rank's values, in the pieces this rank reduces
    const auto reduce = [&](const void* const* sources, void* dst, int64_t len) {
      compress::low_precision_sum_cpu(sources, n, op.dtype, op.wire.dtype, op.wire.scale, op.wire.limit, dst, len,
                                      clamped.data());
    };
    state.reduce_and_distribute(engine, *peers, op.data, element, op.count, reduce);
    // The last round, in a use of its own (the exchange may have used two
    // rounds): nobody returns while a peer may still read or write its tensor.
    engine.start_use();
    return exchange_clamp_counts(engine, clamped, 0);
  }

  int64_t min_bytes_, async_min_bytes_;
  std::shared_ptr<SingleCopyState> state_;
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_low_precision_shm_single_copy(ShmTopology topology, int64_t min_bytes,
                                                                        int64_t huge_pages_min_bytes,
                                                                        int64_t async_min_bytes) {
  return std::make_unique<AllreduceLowPrecisionShmSingleCopy>(std::move(topology), min_bytes, huge_pages_min_bytes,
                                                              async_min_bytes);
}

}  // namespace fastcomm
