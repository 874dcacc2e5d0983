// allreduce_low_precision_via_compress: the low-precision all_reduce
// (LowPrecisionWire, core/collective.h) on any topology, as the composition
// that defines it: compress into a wire-dtype tensor (scale, clamp, round),
// an ordinary SUM all_reduce of that tensor through the dispatcher, widen the
// sum back into the caller's tensor. Registered right after
// allreduce_low_precision_shm, before every other algorithm, so that no
// algorithm which ignores `wire` ever sees a collective that has one.
#include <limits>

#include "algorithms/dispatcher.h"
#include "algorithms/registry.h"
#include "kernels/cpu/compress_cpu.h"

namespace fastcomm {

namespace {

class AllreduceLowPrecisionViaCompress final : public Algorithm {
 public:
  const char* name() const override {
    return "allreduce_low_precision_via_compress";
  }

  bool accepts(const Collective& c) const override {
    return c.wire.has_value();
  }

  Launched launch(Collective& c, Dispatcher& dispatcher) override {
    const LowPrecisionWire wire = *c.wire;
    at::Tensor tensor = c.inputs[0];
    at::Tensor compressed = at::empty({tensor.numel()}, tensor.options().dtype(wire.dtype));
    const int64_t clamped = compress::scaled_copy_cpu(
        {{tensor.const_data_ptr(), tensor.scalar_type(), compressed.data_ptr(), wire.dtype, tensor.numel()}},
        wire.scale, wire.limit);
    if (wire.clamped.defined()) wire.clamped.data_ptr<int64_t>()[0] += clamped;
    Collective sum = c;
    sum.wire.reset();
    sum.inputs = {compressed};
    auto widen = [tensor, compressed]() {
      compress::scaled_copy_cpu({{compressed.const_data_ptr(), compressed.scalar_type(), tensor.data_ptr(),
                                  tensor.scalar_type(), tensor.numel()}},
                                1.0, std::numeric_limits<double>::infinity());
    };
    std::vector<Launched> parts{dispatcher.launch(sum)};
    return then_run(std::move(parts), widen, c.result_tensors());
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_low_precision_via_compress() {
  return std::make_unique<AllreduceLowPrecisionViaCompress>();
}

}  // namespace fastcomm
