#include <numeric>
#include <vector>

#include "core/errors.h"
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
  FC_CHECK(t.dim() == 1 && t.numel() == numel, op, name, " should contain ", numel, " elements, got shape ", t.sizes());
  FC_CHECK(t.device() == device, op, name, " is on ", t.device(), ", expected ", device);
  FC_CHECK(dtype == at::ScalarType::Undefined || t.scalar_type() == dtype, op, name, " should be ", dtype, ", got ",
           t.scalar_type());
}

bool given(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined();
}

namespace {

void check_optional_vector(const std::optional<at::Tensor>& t, int64_t numel, c10::Device device, const char* op,
                           const char* name) {
  if (given(t)) check_vector(*t, numel, device, at::ScalarType::Undefined, op, name);
}

// The number of channels that a packed statistics buffer of 1 + 2C float64 values describes.
int64_t channels_of_packed_stats(const at::Tensor& packed, const char* op) {
  FC_CHECK(packed.dim() == 1 && packed.scalar_type() == at::kDouble && packed.numel() >= 3 && packed.numel() % 2 == 1,
           op, "expected packed statistics (float64, 1 + 2C values), got ", packed.scalar_type(), " of shape ",
           packed.sizes());
  return (packed.numel() - 1) / 2;
}

void check_mean_invstd(const LaidOut& in, const at::Tensor& mean, const at::Tensor& invstd, const char* op) {
  const at::ScalarType acc = stats_dtype_for(in.tensor.scalar_type());
  check_vector(mean, in.layout.channels, in.tensor.device(), acc, op, "mean");
  check_vector(invstd, in.layout.channels, in.tensor.device(), acc, op, "invstd");
}

}  // namespace

int64_t check_finalize_stats_args(const at::Tensor& packed, const std::optional<at::Tensor>& running_mean,
                                  const std::optional<at::Tensor>& running_var, at::ScalarType stats_dtype,
                                  const char* op) {
  const int64_t channels = channels_of_packed_stats(packed, op);
  FC_CHECK(stats_dtype == at::kFloat || stats_dtype == at::kDouble, op, "statistics are float32 or float64, got ",
           stats_dtype);
  check_optional_vector(running_mean, channels, packed.device(), op, "running_mean");
  check_optional_vector(running_var, channels, packed.device(), op, "running_var");
  // Updated in place (on CUDA by one kernel for both): contiguous, of one dtype.
  FC_CHECK(!(given(running_mean) && given(running_var)) || running_mean->scalar_type() == running_var->scalar_type(),
           op, "running_mean and running_var must share a dtype, got ", running_mean->scalar_type(), " and ",
           running_var->scalar_type());
  FC_CHECK(!given(running_mean) || running_mean->is_contiguous(), op,
           "running_mean must be contiguous (it is updated in place), got strides ", running_mean->strides());
  FC_CHECK(!given(running_var) || running_var->is_contiguous(), op,
           "running_var must be contiguous (it is updated in place), got strides ", running_var->strides());
  return channels;
}

void check_normalize_args(const LaidOut& in, const at::Tensor& mean, const at::Tensor& invstd,
                          const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                          const char* op) {
  check_mean_invstd(in, mean, invstd, op);
  check_optional_vector(weight, in.layout.channels, in.tensor.device(), op, "weight");
  check_optional_vector(bias, in.layout.channels, in.tensor.device(), op, "bias");
}

void check_grad_sums_args(const LaidOut& in, const at::Tensor& mean, const char* op) {
  check_vector(mean, in.layout.channels, in.tensor.device(), stats_dtype_for(in.tensor.scalar_type()), op, "mean");
}

void check_grad_input_args(const LaidOut& in, const at::Tensor& mean, const at::Tensor& invstd,
                           const std::optional<at::Tensor>& weight, const at::Tensor& sums, const at::Tensor& packed,
                           const char* op) {
  const int64_t channels = in.layout.channels;
  check_mean_invstd(in, mean, invstd, op);
  check_optional_vector(weight, channels, in.tensor.device(), op, "weight");
  check_vector(sums, 2 * channels, in.tensor.device(), at::kDouble, op, "sums");
  FC_CHECK(channels_of_packed_stats(packed, op) == channels, op, "packed statistics describe ",
           channels_of_packed_stats(packed, op), " channels, the input has ", channels);
  // Its count is read where the op runs.
  FC_CHECK(packed.device() == in.tensor.device(), op, "packed is on ", packed.device(), ", expected ",
           in.tensor.device());
}

}  // namespace syncbn
}  // namespace fastcomm
