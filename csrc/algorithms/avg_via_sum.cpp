// avg_via_sum: ReduceOp.AVG on CPU, which torch documents as NCCL-only.
//
// Steps: the same reduction with SUM, then each result divided by the group
// size in place (floating types: true division; integer types: division
// truncated toward zero, as NCCL's ncclAvg does). No extra bytes on the wire.
#include "algorithms/dispatcher.h"
#include "algorithms/registry.h"

namespace fastcomm {

namespace {

class AvgViaSum final : public Algorithm {
 public:
  AvgViaSum(int rank, int world_size) : rank_(rank), world_size_(world_size) {}

  const char* name() const override {
    return "avg_via_sum";
  }

  bool accepts(const Collective& c) const override {
    return c.device == c10::DeviceType::CPU && c.is_reduction() && c.reduce_op == c10d::ReduceOp::AVG;
  }

  Launched launch(Collective& c, Dispatcher& dispatcher) override {
    Collective as_sum = c;
    as_sum.reduce_op = c10d::ReduceOp::SUM;
    std::vector<at::Tensor> results = c.written_tensors();
    if (c.type == c10d::OpType::REDUCE && c.peer != rank_) results.clear();  // only the root holds the sum
    const int64_t n = world_size_;
    auto divide = [results, n]() {
      for (const auto& t : results) {
        if (at::isFloatingType(t.scalar_type())) {
          t.div_(n);
        } else {
          t.div_(n, "trunc");
        }
      }
    };
    std::vector<Launched> parts{dispatcher.launch(as_sum)};
    return then_run(std::move(parts), divide, c.result_tensors());
  }

 private:
  int rank_;
  int world_size_;
};

}  // namespace

std::unique_ptr<Algorithm> make_avg_via_sum(int rank, int world_size) {
  return std::make_unique<AvgViaSum>(rank, world_size);
}

}  // namespace fastcomm
