// contiguous_staging: runs a collective on non-contiguous tensors.
//
// Steps: copy every tensor to a contiguous one, launch the same collective on
// the copies, copy the written tensors back into the caller's tensors.
// Extra memory traffic: one read + one write of each tensor in, one of each
// written tensor out. P2P is refused instead (see validation), since its works
// have no future to chain the copy-back on.
#include "algorithms/dispatcher.h"
#include "algorithms/registry.h"

namespace fastcomm {

namespace {

class ContiguousStaging final : public Algorithm {
 public:
  const char* name() const override {
    return "contiguous_staging";
  }

  bool accepts(const Collective& c) const override {
    if (c.is_p2p()) return false;
    return c.any_tensor(
        [](const at::Tensor& t) { return t.defined() && t.layout() == c10::kStrided && !t.is_contiguous(); });
  }

  Launched launch(Collective& c, Dispatcher& dispatcher) override {
    Collective staged = map_tensors(c, [](const at::Tensor& t) { return t.contiguous(); });
    Launched inner = dispatcher.launch(staged);
    auto originals = c.written_tensors();
    auto copies = staged.written_tensors();
    auto copy_back = [originals, copies]() {
      for (size_t i = 0; i < originals.size(); ++i) {
        if (!originals[i].is_same(copies[i])) originals[i].copy_(copies[i]);
      }
    };
    std::vector<Launched> parts{std::move(inner)};
    return then_run(std::move(parts), copy_back, c.result_tensors());
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_contiguous_staging() {
  return std::make_unique<ContiguousStaging>();
}

}  // namespace fastcomm
