// reinterpret_dtype: data-movement collectives (broadcast, gathers, scatter,
// all_to_all, p2p) on dtypes the transports refuse though they only copy bytes:
// int16 (Gloo, NCCL) and the move-only dtypes uint16/32/64 and float8 (Gloo).
//
// Steps: view each tensor as the same-size dtype every transport moves
// (1 byte: uint8, 2: float16, 4: int32, 8: int64; no copy), launch, nothing
// afterwards: the views share the caller's storage. Bytes are moved bit-exactly
// because data-movement collectives never do arithmetic.
#include "algorithms/dispatcher.h"
#include "algorithms/registry.h"
#include "core/support.h"

namespace fastcomm {

namespace {

at::ScalarType carrier_for(at::ScalarType dtype) {
  switch (c10::elementSize(dtype)) {
    case 1:
      return at::kByte;
    case 2:
      return at::kHalf;
    case 4:
      return at::kInt;
    default:
      return at::kLong;
  }
}

class ReinterpretDtype final : public Algorithm {
 public:
  const char* name() const override {
    return "reinterpret_dtype";
  }

  bool accepts(const Collective& c) const override {
    const auto dtype = c.dtype();
    return !c.is_reduction() && (dtype == at::kShort || is_move_only_dtype(dtype));
  }

  Launched launch(Collective& c, Dispatcher& dispatcher) override {
    const at::ScalarType carrier = carrier_for(c.dtype());
    Collective viewed = map_tensors(c, [carrier](const at::Tensor& t) { return t.view(carrier); });
    Launched inner = dispatcher.launch(viewed);
    if (!inner.future && !inner.finished) return inner;  // p2p: nothing to do afterwards
    std::vector<Launched> parts{std::move(inner)};
    return then_run(std::move(parts), nullptr, c.result_tensors());
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_reinterpret_dtype() {
  return std::make_unique<ReinterpretDtype>();
}

}  // namespace fastcomm
