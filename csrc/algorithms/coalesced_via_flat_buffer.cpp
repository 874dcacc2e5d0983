// coalesced_via_flat_buffer: allreduce_coalesced, allgather_into_tensor_coalesced
// (and the deprecated list form all_gather_coalesced) and
// reduce_scatter_tensor_coalesced (the coalescing manager's fast paths) as one
// collective per dtype over a packed buffer.
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
                           c.type == kReduceScatterTensorCoalesced;
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
      flat.output_lists.clear();
      if (c.type == c10d::OpType::ALLREDUCE_COALESCED) {
        at::Tensor buffer = pack(inputs);
        flat.type = c10d::OpType::ALLREDUCE;
        flat.inputs = {buffer};
        unpacks.push_back([buffer, inputs]() { unpack(buffer, inputs); });
      } else if (c.type == c10d::OpType::ALLGATHER_COALESCED) {
        // Row r of the gathered buffer is rank r's packed inputs.
        std::vector<std::vector<at::Tensor>> per_rank(world_size_);
        if (!c.output_lists.empty()) {  // list form: output_lists[r][i]
          for (int64_t r = 0; r < world_size_; ++r) per_rank[r] = pick(c.output_lists[r], group);
        } else {  // tensor form: chunk r of outputs[i]
          for (size_t i : group) {
            auto chunks = rank_chunks(c.outputs[i], world_size_);
            for (int64_t r = 0; r < world_size_; ++r) per_rank[r].push_back(chunks[r]);
          }
        }
        at::Tensor in = pack(inputs);
        at::Tensor out = at::empty({in.numel() * world_size_}, in.options());
        flat.type = c10d::OpType::_ALLGATHER_BASE;
        flat.inputs = {in};
        flat.outputs = {out};
        const int64_t row = in.numel();
        unpacks.push_back([out, per_rank, row]() {
          for (size_t r = 0; r < per_rank.size(); ++r) unpack(out.narrow(0, r * row, row), per_rank[r]);
        });
      } else {
        // Row r of the flat input is chunk r of every input, which rank r receives reduced.
        auto outputs = pick(c.outputs, group);
        int64_t row = 0;
        for (const auto& t : outputs) row += t.numel();
        at::Tensor in = at::empty({row * world_size_}, inputs[0].options());
        std::vector<std::vector<at::Tensor>> chunks;
        for (const auto& t : inputs) chunks.push_back(rank_chunks(t, world_size_));
        for (int64_t r = 0; r < world_size_; ++r) {
          std::vector<at::Tensor> row_parts;
          for (const auto& per_input : chunks) row_parts.push_back(per_input[r]);
          pack_into(in.narrow(0, r * row, row), row_parts);
        }
        at::Tensor out = at::empty({row}, in.options());
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
