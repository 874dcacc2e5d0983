// allreduce_low_precision_shm: the low-precision all_reduce (LowPrecisionWire,
// core/collective.h) among the ranks of one host, converting on the way into
// and out of the segment instead of in passes of their own.
//
// Per chunk of at most one slot of wire elements (float16/bfloat16), split
// into P slices, as allreduce_shm_twoshot:
//   write:  each rank converts its whole chunk (scale, clamp, round to the
//           wire dtype) straight into its slot;
//   round 1, reduce: rank r sums slice r of every slot in float32 and rounds
//           once into slice r of its own slot;
//   round 2, gather: each rank widens slice q of rank q's slot into its
//           tensor, for every q.
// Per float32 element that is 4 + 2 bytes in, (P + 1) / P * 2 to reduce and
// 2 + 4 out, against the separate compress, copy-in, copy-out and decompress
// passes of the composition it replaces, whose result it equals bit for bit
// (same conversions, same rank-order float32 sums). From
// Config::shm_async_min_bytes on it runs on the engine's op queue
// (shm_common.h): launch returns at once. Arena tensors and ordinary ones from
// single copy's minimum go to the one-pass algorithms registered before it
// (allreduce_low_precision_shm_arena, _single_copy): every rank converts and
// widens the whole tensor here, where those touch only their slice of it.
#include <limits>
#include <vector>

#include "algorithms/allreduce_low_precision_shm.h"
#include "algorithms/registry.h"
#include "kernels/cpu/compress_cpu.h"
#include "kernels/cpu/reduce.h"

namespace fastcomm {

int64_t run_allreduce_low_precision_segment(shm::Engine& engine, const LowPrecisionOp& op) {
  const LowPrecisionWire& wire = op.wire;
  const c10::ScalarType dtype = op.dtype;
  char* const data = op.data;
  const int64_t count = op.count;
  const int n = engine.local_size(), me = engine.local_rank();
  const size_t element = c10::elementSize(dtype), wire_element = c10::elementSize(wire.dtype);
  const int64_t chunk = static_cast<int64_t>(engine.slot_bytes() / wire_element);
  std::vector<const void*> slices(n);
  std::vector<compress::ScaledCopy> widen(n);
  int64_t clamped = 0, offset = 0;
  do {
    const int64_t len = std::min(chunk, count - offset);
    engine.start_use();
    clamped += compress::scaled_copy_cpu({{data + offset * element, dtype, engine.my_slot(), wire.dtype, len}},
                                         wire.scale, wire.limit);
    engine.round();
    const int64_t mine_begin = slice_begin(len, n, me), mine_end = slice_begin(len, n, me + 1);
    for (int q = 0; q < n; ++q) slices[q] = engine.slot_of(q) + mine_begin * wire_element;
    kernels::reduce(wire.dtype, ReduceKind::Sum, slices.data(), n, engine.my_slot() + mine_begin * wire_element,
                    mine_end - mine_begin);
    engine.round();
    for (int q = 0; q < n; ++q) {
      const int64_t begin = slice_begin(len, n, q), end = slice_begin(len, n, q + 1);
      widen[q] = {engine.slot_of(q) + begin * wire_element, wire.dtype, data + (offset + begin) * element, dtype,
                  end - begin};
    }
    compress::scaled_copy_cpu(widen, 1.0, std::numeric_limits<double>::infinity());
    offset += len;
  } while (offset < count);
  return clamped;
}

namespace {

class AllreduceLowPrecisionShm final : public ShmAlgorithm {
 public:
  AllreduceLowPrecisionShm(ShmTopology topology, int64_t async_min_bytes)
      : ShmAlgorithm(std::move(topology)), async_min_bytes_(async_min_bytes) {}

  const char* name() const override {
    return "allreduce_low_precision_shm";
  }

  bool accepts(const Collective& c) const override {
    return c.wire && topology_.single_host() && shm_eligible(c);
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const LowPrecisionOp op = low_precision_op(c);
    // By value: the body may run after launch returned.
    auto body = [&engine, op]() { add_clamps(op.wire, run_allreduce_low_precision_segment(engine, op)); };
    return shm_run_sized(engine, c, low_precision_describe(protocol(), c, op, -1), std::move(body), async_min_bytes_,
                         op.bytes);
  }

 private:
  int64_t async_min_bytes_;
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_low_precision_shm(ShmTopology topology, int64_t async_min_bytes) {
  return std::make_unique<AllreduceLowPrecisionShm>(std::move(topology), async_min_bytes);
}

}  // namespace fastcomm
