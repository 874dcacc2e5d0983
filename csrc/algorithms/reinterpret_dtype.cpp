// reinterpret_dtype: data-movement collectives (broadcast, gathers, scatter,
// all_to_all, p2p) on int16, which Gloo refuses though it only copies bytes.
//
// Steps: view each tensor as float16 (same element size, no copy), launch,
// nothing afterwards: the views share the caller's storage. Bytes are moved
// bit-exactly because data-movement collectives never do arithmetic.
#include "algorithms/dispatcher.h"
#include "algorithms/registry.h"

namespace fastcomm {

namespace {

class ReinterpretDtype final : public Algorithm {
 public:
  const char* name() const override {
    return "reinterpret_dtype";
  }

  bool accepts(const Collective& c) const override {
    return !c.is_reduction() && c.dtype() == at::kShort;
  }

  Launched launch(Collective& c, Dispatcher& dispatcher) override {
    Collective viewed = map_tensors(c, [](const at::Tensor& t) { return t.view(at::kHalf); });
    Launched inner = dispatcher.launch(viewed);
    if (!inner.future) return inner;  // p2p: nothing to do afterwards
    std::vector<Launched> parts{std::move(inner)};
    return then_run(std::move(parts), nullptr, c.result_tensors());
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_reinterpret_dtype() {
  return std::make_unique<ReinterpretDtype>();
}

}  // namespace fastcomm
