#include <numeric>
#include <vector>

#include "common/errors.h"
#include "ops/syncbn_ops.h"

namespace fastcomm {
namespace syncbn {

namespace {

// (0, 2, 3, ..., d-1, 1): the dimension order of a channels-last tensor in memory.
std::vector<int64_t> channels_last_order(int64_t dim) {
  std::vector<int64_t> order(dim);
  std::iota(order.begin(), order.end(), 0);
  order.erase(order.begin() + 1);
  order.push_back(1);
  return order;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& order) {
  std::vector<int64_t> inv(order.size());
  for (size_t i = 0; i < order.size(); ++i) inv[order[i]] = static_cast<int64_t>(i);
  return inv;
}

bool is_channels_last_dense(const at::Tensor& t) {
  return t.dim() >= 3 && t.permute(channels_last_order(t.dim())).is_contiguous();
}

}  // namespace

LaidOut lay_out(const at::Tensor& input, const char* op) {
  FC_CHECK(input.dim() >= 2, op, "expected at least 2D input (got ", input.dim(), "D input)");
  FC_CHECK(input.size(1) > 0, op, "the input has no channels (shape ", input.sizes(), ")");
  FC_CHECK(at::isFloatingType(input.scalar_type()), op, "expected a floating-point input, got ", input.scalar_type());
  const int64_t n = input.size(0);
  const int64_t c = input.size(1);
  int64_t inner = 1;
  for (int64_t d = 2; d < input.dim(); ++d) inner *= input.size(d);
  if (input.is_contiguous()) return {input, {n, c, inner}, false};
  if (is_channels_last_dense(input)) return {input, {n * inner, c, 1}, true};
  return {input.contiguous(), {n, c, inner}, false};
}

at::Tensor in_layout_of(const at::Tensor& t, const LaidOut& like, const char* op) {
  FC_CHECK(t.sizes() == like.tensor.sizes(), op, "expected a tensor of shape ", like.tensor.sizes(), ", got ",
           t.sizes());
  FC_CHECK(t.scalar_type() == like.tensor.scalar_type(), op, "expected dtype ", like.tensor.scalar_type(), ", got ",
           t.scalar_type());
  if (!like.channels_last) return t.contiguous();
  if (is_channels_last_dense(t)) return t;
  const auto order = channels_last_order(t.dim());
  return t.permute(order).contiguous().permute(inverse(order));
}

at::ScalarType stats_dtype_for(at::ScalarType dtype) {
  return dtype == at::kDouble ? at::kDouble : at::kFloat;
}

void check_vector(const at::Tensor& t, int64_t numel, c10::Device device, at::ScalarType dtype, const char* op,
                  const char* name) {
  FC_CHECK(t.dim() == 1 && t.numel() == numel, op, name, " should contain ", numel, " elements, got shape ",
           t.sizes());
  FC_CHECK(t.device() == device, op, name, " is on ", t.device(), ", expected ", device);
  FC_CHECK(dtype == at::ScalarType::Undefined || t.scalar_type() == dtype, op, name, " should be ", dtype, ", got ",
           t.scalar_type());
}

int64_t channels_of_packed_stats(const at::Tensor& packed, const char* op) {
  FC_CHECK(packed.dim() == 1 && packed.scalar_type() == at::kDouble && packed.numel() >= 3 && packed.numel() % 2 == 1,
           op, "expected packed statistics (float64, 1 + 2C values), got ", packed.scalar_type(), " of shape ",
           packed.sizes());
  return (packed.numel() - 1) / 2;
}

}  // namespace syncbn
}  // namespace fastcomm
