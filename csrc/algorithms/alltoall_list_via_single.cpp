// alltoall_list_via_single: all_to_all on lists of tensors of uneven sizes
// (Gloo requires every tensor to have the same shape).
//
// Steps: pack the inputs into one flat buffer, one all_to_all_single with
// per-peer element counts as split sizes, unpack the flat output into the
// output list. Wire bytes: exactly the payload, as the list version.
#include "algorithms/dispatcher.h"
#include "algorithms/flat_buffer.h"
#include "algorithms/registry.h"

namespace fastcomm {

namespace {

class AlltoallListViaSingle final : public Algorithm {
 public:
  const char* name() const override {
    return "alltoall_list_via_single";
  }

  bool accepts(const Collective& c) const override {
    return c.type == c10d::OpType::ALLTOALL && c.device == c10::DeviceType::CPU && can_pack(c.device);
  }

  Launched launch(Collective& c, Dispatcher& dispatcher) override {
    Collective single = c;
    single.type = c10d::OpType::ALLTOALL_BASE;
    single.input_splits.clear();
    single.output_splits.clear();
    int64_t out_total = 0;
    for (const auto& t : c.inputs) single.input_splits.push_back(t.numel());
    for (const auto& t : c.outputs) {
      single.output_splits.push_back(t.numel());
      out_total += t.numel();
    }
    at::Tensor out = at::empty({out_total}, c.outputs[0].options());
    single.inputs = {pack(c.inputs)};
    single.outputs = {out};
    auto outputs = c.outputs;
    std::vector<Launched> parts{dispatcher.launch(single)};
    return then_run(std::move(parts), [out, outputs]() { unpack(out, outputs); }, c.result_tensors());
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_alltoall_list_via_single() {
  return std::make_unique<AlltoallListViaSingle>();
}

}  // namespace fastcomm
