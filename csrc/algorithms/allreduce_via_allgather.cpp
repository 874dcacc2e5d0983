// allreduce_via_allgather: small CPU all_reduce in one round of messages.
//
// Gloo's all_reduce runs a reduce-scatter and then an all-gather, so even a
// few bytes pay two rounds of its latency; an all_gather pays one. For tensors
// of at most `max_bytes` this algorithm gathers every rank's tensor and reduces
// the rows locally, in rank order, so every rank computes bitwise the same
// result. The gathered volume grows with P, so it pays only for small
// messages (benchmarks/allreduce_vs_gloo.py with
// FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES at 0 and above the sizes measured).
//
// Steps: one all_gather_into_tensor (each rank receives (P-1) * S bytes), then
// P-1 elementwise passes over S bytes. Accepts SUM, PRODUCT, MIN, MAX and the
// bitwise ops on every reducible dtype but bool (AVG and int16 were rewritten
// into SUM and int32 before this runs); empty tensors stay with Gloo.
//
// To Gloo the all_gather looks like any other: the ranks first compare the
// call as the all_reduce it is (call_check.h), so an all_reduce on one rank
// against an all_gather_into_tensor of the same bytes on another raises
// instead of returning gathered rows as sums. Up to CallCheck::kInlineBytes
// the rows travel inside the check itself: still one round.
#include "algorithms/delegated.h"
#include "algorithms/dispatcher.h"
#include "algorithms/registry.h"
#include "core/support.h"
#include "transport/shm/engine.h"

namespace fastcomm {

namespace {

// acc op= row, elementwise, in place (acc: a handle to the result tensor).
void reduce_into(at::Tensor acc, const at::Tensor& row, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::Sum:
      acc.add_(row);
      break;
    case ReduceKind::Product:
      acc.mul_(row);
      break;
    case ReduceKind::Min:
      at::minimum_out(acc, acc, row);
      break;
    case ReduceKind::Max:
      at::maximum_out(acc, acc, row);
      break;
    case ReduceKind::BitAnd:
      acc.bitwise_and_(row);
      break;
    case ReduceKind::BitOr:
      acc.bitwise_or_(row);
      break;
    case ReduceKind::BitXor:
      acc.bitwise_xor_(row);
      break;
  }
}

// The gather and the local reduction, on `gloo`, now.
Launched gather_and_reduce(c10d::Backend& gloo, const Collective& c, int world_size) {
  const at::Tensor flat = c.inputs[0].view({-1});
  const at::Tensor gathered = at::empty({world_size, flat.numel()}, flat.options());
  Collective gather;
  gather.type = c10d::OpType::_ALLGATHER_BASE;
  gather.name = c.name;
  gather.inputs = {flat};
  gather.outputs = {gathered.view({-1})};
  gather.timeout = c.timeout;
  gather.device = c.device;
  const ReduceKind kind = *elementwise_kind(c.reduce_op);
  auto reduce = [flat, gathered, kind]() {
    flat.copy_(gathered[0]);
    for (int64_t r = 1; r < gathered.size(0); ++r) reduce_into(flat, gathered[r], kind);
  };
  std::vector<Launched> parts{delegate(gloo, gather)};
  return then_run(std::move(parts), reduce, c.result_tensors());
}

class AllreduceViaAllgather final : public Algorithm {
 public:
  AllreduceViaAllgather(int world_size, int64_t max_bytes, c10::intrusive_ptr<c10d::Backend> gloo,
                        std::shared_ptr<CallCheck> check)
      : world_size_(world_size),
        max_bytes_(max_bytes),
        gloo_(std::move(gloo)),
        check_(std::move(check)),
        protocol_(shm::protocol_code(name())) {}

  const char* name() const override {
    return "allreduce_via_allgather";
  }

  bool accepts(const Collective& c) const override {
    if (c.device != c10::DeviceType::CPU || c.type != c10d::OpType::ALLREDUCE || world_size_ < 2) return false;
    if (c.inputs.size() != 1 || !elementwise_kind(c.reduce_op)) return false;
    const at::Tensor& t = c.inputs[0];
    return t.is_contiguous() && t.scalar_type() != at::kBool && t.numel() > 0 &&
           static_cast<int64_t>(t.nbytes()) <= max_bytes_;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    const at::Tensor flat = c.inputs[0].view({-1});
    if (static_cast<int64_t>(flat.nbytes()) <= CallCheck::kInlineBytes) {
      // The rows travel inside the check: one round, as the all_gather alone took.
      // (A copy with unit stride: a one-element view may have any stride.)
      const at::Tensor bytes = flat.clone(at::MemoryFormat::Contiguous).view(at::kByte);
      const ReduceKind kind = *elementwise_kind(c.reduce_op);
      return check_->run_inline(c, protocol_, bytes, [flat, kind](const std::vector<at::Tensor>& rows) {
        flat.copy_(rows[0].view(flat.scalar_type()));
        for (size_t r = 1; r < rows.size(); ++r) reduce_into(flat, rows[r].view(flat.scalar_type()), kind);
      });
    }
    return check_->run(c, protocol_, [gloo = gloo_, c, world_size = world_size_]() {
      return gather_and_reduce(*gloo, c, world_size);
    });
  }

 private:
  int world_size_;
  int64_t max_bytes_;
  c10::intrusive_ptr<c10d::Backend> gloo_;
  std::shared_ptr<CallCheck> check_;
  uint16_t protocol_;  // shm::protocol_code(name()), for the check
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_via_allgather(int world_size, int64_t max_bytes,
                                                        c10::intrusive_ptr<c10d::Backend> gloo,
                                                        std::shared_ptr<CallCheck> check) {
  return std::make_unique<AllreduceViaAllgather>(world_size, max_bytes, std::move(gloo), std::move(check));
}

}  // namespace fastcomm
