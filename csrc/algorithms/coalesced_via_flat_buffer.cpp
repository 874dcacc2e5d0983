// coalesced_via_flat_buffer: allreduce_coalesced, allgather_into_tensor_coalesced
// and reduce_scatter_tensor_coalesced (the coalescing manager's fast paths) as
// one collective per dtype over a packed buffer.
//
// Steps per dtype group: pack (one multi-tensor copy), one flat collective,
// unpack (one multi-tensor copy). Wire bytes: those of a single collective of
// the summed size, instead of one latency per tensor.
#include "algorithms/dispatcher.h"
#include "algorithms/flat_buffer.h"
#include "algorithms/registry.h"

namespace fastcomm {

namespace {

std::vector<at::Tensor> pick(const std::vector<at::Tensor>& all, const std::vector<size_t>& indices) {
  std::vector<at::Tensor> out;
  for (size_t i : indices) out.push_back(all[i]);
  return out;
}

class CoalescedViaFlatBuffer final : public Algorithm {
 public:
  explicit CoalescedViaFlatBuffer(int world_size) : world_size_(world_size) {}

  const char* name() const override {
    return "coalesced_via_flat_buffer";
  }

  bool accepts(const Collective& c) const override {
    using c10d::OpType;
    const bool coalesced = c.type == OpType::ALLREDUCE_COALESCED || c.type == OpType::ALLGATHER_COALESCED ||
                           c.type == OpType::REDUCE_SCATTER_TENSOR_COALESCED;
    return coalesced && !c.inputs.empty() && can_pack(c.device);
  }

  Launched launch(Collective& c, Dispatcher& dispatcher) override {
    std::vector<Launched> parts;
    std::vector<std::function<void()>> unpacks;
    for (const auto& group : group_by_dtype(c.inputs)) {
      auto inputs = pick(c.inputs, group);
      Collective flat = c;
      flat.inputs.clear();
      flat.outputs.clear();
      if (c.type == c10d::OpType::ALLREDUCE_COALESCED) {
        at::Tensor buffer = pack(inputs);
        flat.type = c10d::OpType::ALLREDUCE;
        flat.inputs = {buffer};
        unpacks.push_back([buffer, inputs]() { unpack(buffer, inputs); });
      } else if (c.type == c10d::OpType::ALLGATHER_COALESCED) {
        auto outputs = pick(c.outputs, group);
        at::Tensor in = pack(inputs);
        at::Tensor out = at::empty({in.numel() * world_size_}, in.options());
        flat.type = c10d::OpType::_ALLGATHER_BASE;
        flat.inputs = {in};
        flat.outputs = {out};
        const int64_t n = world_size_;
        unpacks.push_back([out, outputs, n]() {
          copy_segments(out.device(), rank_major_segments(out, outputs, n, /*to_flat=*/false));
        });
      } else {
        auto outputs = pick(c.outputs, group);
        int64_t total = 0;
        for (const auto& t : inputs) total += t.numel();
        at::Tensor in = at::empty({total}, inputs[0].options());
        copy_segments(in.device(), rank_major_segments(in, inputs, world_size_, /*to_flat=*/true));
        at::Tensor out = at::empty({total / world_size_}, in.options());
        flat.type = c10d::OpType::_REDUCE_SCATTER_BASE;
        flat.inputs = {in};
        flat.outputs = {out};
        unpacks.push_back([out, outputs]() { unpack(out, outputs); });
      }
      parts.push_back(dispatcher.launch(flat));
    }
    auto unpack_all = [unpacks]() {
      for (const auto& u : unpacks) u();
    };
    return then_run(std::move(parts), unpack_all, c.result_tensors());
  }

 private:
  int world_size_;
};

}  // namespace

std::unique_ptr<Algorithm> make_coalesced_via_flat_buffer(int world_size) {
  return std::make_unique<CoalescedViaFlatBuffer>(world_size);
}

}  // namespace fastcomm
