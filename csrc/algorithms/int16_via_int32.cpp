// int16_via_int32: reductions on int16, which Gloo does not support.
//
// Steps: widen every tensor to int32 (a copy), reduce, narrow the written
// tensors back. Two's-complement arithmetic makes the narrowed SUM and PRODUCT
// equal to int16 wrap-around arithmetic; MIN/MAX/BAND/BOR/BXOR are exact.
// Wire bytes: 2x the int16 payload.
#include "algorithms/dispatcher.h"
#include "algorithms/registry.h"

namespace fastcomm {

namespace {

class Int16ViaInt32 final : public Algorithm {
 public:
  const char* name() const override {
    return "int16_via_int32";
  }

  bool accepts(const Collective& c) const override {
    return c.is_reduction() && c.dtype() == at::kShort;
  }

  Launched launch(Collective& c, Dispatcher& dispatcher) override {
    Collective wide = map_tensors(c, [](const at::Tensor& t) { return t.to(at::kInt); });
    auto originals = c.written_tensors();
    auto copies = wide.written_tensors();
    auto narrow = [originals, copies]() {
      for (size_t i = 0; i < originals.size(); ++i) originals[i].copy_(copies[i]);
    };
    std::vector<Launched> parts{dispatcher.launch(wide)};
    return then_run(std::move(parts), narrow, c.result_tensors());
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_int16_via_int32() {
  return std::make_unique<Int16ViaInt32>();
}

}  // namespace fastcomm
