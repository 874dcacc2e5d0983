// The fastcomm::syncbn_* operators: schemas and CPU implementations.
//
// fastcomm.nn.SyncBatchNorm calls them in this order (one training step):
//   forward:  local_stats -> allreduce(packed) -> finalize_stats -> normalize
//   backward: grad_sums -> allreduce(sums) -> grad_input
// Packed buffers are described in kernels/syncbn_math.h. The CUDA
// implementations register themselves from csrc/ops/syncbn_ops_cuda.cu.
#include <torch/library.h>

#include <vector>

#include "core/errors.h"
#include "kernels/cpu/syncbn_cpu.h"
#include "ops/syncbn_ops.h"

namespace fastcomm {
namespace syncbn {

namespace {

template <typename Acc>
std::vector<Acc> channel_values_or(const std::optional<at::Tensor>& t, int64_t channels, Acc fallback,
                                   at::ScalarType acc_dtype) {
  if (!given(t)) return std::vector<Acc>(channels, fallback);
  const at::Tensor values = t->to(acc_dtype).contiguous();
  const Acc* p = values.const_data_ptr<Acc>();
  return std::vector<Acc>(p, p + channels);
}

at::Tensor local_stats_cpu(const at::Tensor& input) {
  constexpr const char* op = "syncbn_local_stats";
  const LaidOut in = lay_out(input, op);
  at::Tensor packed = at::empty({in.layout.packed_stats_size()}, input.options().dtype(at::kDouble));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), op, [&] {
    welford_stats_cpu<scalar_t>(in.tensor.const_data_ptr<scalar_t>(), in.layout, packed.data_ptr<double>());
  });
  return packed;
}

std::tuple<at::Tensor, at::Tensor> finalize_stats_cpu(const at::Tensor& packed, double eps, double momentum,
                                                      const std::optional<at::Tensor>& running_mean,
                                                      const std::optional<at::Tensor>& running_var,
                                                      at::ScalarType stats_dtype) {
  constexpr const char* op = "syncbn_finalize_stats";
  const int64_t channels = check_finalize_stats_args(packed, running_mean, running_var, stats_dtype, op);
  const at::Tensor sums = packed.contiguous();
  const double* s = sums.const_data_ptr<double>();
  const double n = s[0];
  FC_CHECK(n > 1, op, "expected more than 1 value per channel over the group, got ", n);
  std::vector<double> mean(channels), invstd(channels), unbiased_var(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const ChannelStats stats = finalize_channel(n, s[1 + c], s[1 + channels + c]);
    mean[c] = stats.mean;
    invstd[c] = 1.0 / std::sqrt(stats.biased_var + eps);
    unbiased_var[c] = stats.unbiased_var;
  }
  auto update = [&](const std::optional<at::Tensor>& running, const std::vector<double>& batch) {
    if (!given(running)) return;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, running->scalar_type(), op, [&] {
      auto values = running->accessor<scalar_t, 1>();
      for (int64_t c = 0; c < channels; ++c) {
        values[c] = static_cast<scalar_t>((1.0 - momentum) * static_cast<double>(values[c]) + momentum * batch[c]);
      }
    });
  };
  update(running_mean, mean);
  update(running_var, unbiased_var);
  const auto options = packed.options().dtype(at::kDouble);
  return {at::tensor(mean, options).to(stats_dtype), at::tensor(invstd, options).to(stats_dtype)};
}

at::Tensor normalize_cpu_op(const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
                            const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias) {
  constexpr const char* op = "syncbn_normalize";
  const LaidOut in = lay_out(input, op);
  check_normalize_args(in, mean, invstd, weight, bias, op);
  const int64_t channels = in.layout.channels;
  const at::ScalarType acc_dtype = stats_dtype_for(input.scalar_type());
  at::Tensor output = at::empty_like(in.tensor);
  const at::Tensor mean_c = mean.contiguous();  // held: the kernels read their data
  const at::Tensor invstd_c = invstd.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), op, [&] {
    using Acc = acc_type<scalar_t>;
    const Acc* m = mean_c.const_data_ptr<Acc>();
    const Acc* inv = invstd_c.const_data_ptr<Acc>();
    std::vector<Acc> scale = channel_values_or<Acc>(weight, channels, Acc(1), acc_dtype);
    const std::vector<Acc> shift = channel_values_or<Acc>(bias, channels, Acc(0), acc_dtype);
    for (int64_t c = 0; c < channels; ++c) scale[c] *= inv[c];
    normalize_cpu<scalar_t, Acc>(in.tensor.const_data_ptr<scalar_t>(), output.data_ptr<scalar_t>(), in.layout, m,
                                 scale.data(), shift.data());
  });
  return output;
}

at::Tensor grad_sums_cpu_op(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean) {
  constexpr const char* op = "syncbn_grad_sums";
  const LaidOut in = lay_out(input, op);
  const at::Tensor dy = in_layout_of(grad_output, in, op);
  check_grad_sums_args(in, mean, op);
  at::Tensor sums = at::empty({2 * in.layout.channels}, input.options().dtype(at::kDouble));
  const at::Tensor mean_c = mean.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), op, [&] {
    using Acc = acc_type<scalar_t>;
    grad_sums_cpu<scalar_t, Acc>(dy.const_data_ptr<scalar_t>(), in.tensor.const_data_ptr<scalar_t>(), in.layout,
                                 mean_c.const_data_ptr<Acc>(), sums.data_ptr<double>());
  });
  return sums;
}

at::Tensor grad_input_cpu_op(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
                             const at::Tensor& invstd, const std::optional<at::Tensor>& weight, const at::Tensor& sums,
                             const at::Tensor& packed) {
  constexpr const char* op = "syncbn_grad_input";
  const LaidOut in = lay_out(input, op);
  const at::Tensor dy = in_layout_of(grad_output, in, op);
  check_grad_input_args(in, mean, invstd, weight, sums, packed, op);
  const int64_t channels = in.layout.channels;
  const at::ScalarType acc_dtype = stats_dtype_for(input.scalar_type());
  at::Tensor grad_input = at::empty_like(in.tensor);
  const at::Tensor sums_c = sums.contiguous();  // held: the kernels read their data
  const at::Tensor mean_c = mean.contiguous();
  const at::Tensor invstd_c = invstd.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), op, [&] {
    using Acc = acc_type<scalar_t>;
    const double n = packed.const_data_ptr<double>()[0];
    const double* s = sums_c.const_data_ptr<double>();
    const Acc* inv = invstd_c.const_data_ptr<Acc>();
    const std::vector<Acc> w = channel_values_or<Acc>(weight, channels, Acc(1), acc_dtype);
    std::vector<Acc> a(channels), b(channels), c(channels);
    for (int64_t ch = 0; ch < channels; ++ch) {
      const GradInputCoefficients k = grad_input_coefficients(n, s[ch], s[channels + ch], inv[ch], w[ch]);
      a[ch] = static_cast<Acc>(k.a);
      b[ch] = static_cast<Acc>(k.b);
      c[ch] = static_cast<Acc>(k.c);
    }
    grad_input_cpu<scalar_t, Acc>(dy.const_data_ptr<scalar_t>(), in.tensor.const_data_ptr<scalar_t>(),
                                  grad_input.data_ptr<scalar_t>(), in.layout, mean_c.const_data_ptr<Acc>(), a.data(),
                                  b.data(), c.data());
  });
  return grad_input;
}

}  // namespace

}  // namespace syncbn
}  // namespace fastcomm

TORCH_LIBRARY_FRAGMENT(fastcomm, m) {
  m.def("syncbn_local_stats(Tensor input) -> Tensor");
  m.def(
      "syncbn_finalize_stats(Tensor packed, float eps, float momentum, Tensor(a!)? running_mean, "
      "Tensor(b!)? running_var, ScalarType stats_dtype) -> (Tensor, Tensor)");
  m.def("syncbn_normalize(Tensor input, Tensor mean, Tensor invstd, Tensor? weight, Tensor? bias) -> Tensor");
  m.def("syncbn_grad_sums(Tensor grad_output, Tensor input, Tensor mean) -> Tensor");
  m.def(
      "syncbn_grad_input(Tensor grad_output, Tensor input, Tensor mean, Tensor invstd, Tensor? weight, "
      "Tensor sums, Tensor packed) -> Tensor");
}

TORCH_LIBRARY_IMPL(fastcomm, CPU, m) {
  using namespace fastcomm::syncbn;
  m.impl("syncbn_local_stats", &local_stats_cpu);
  m.impl("syncbn_finalize_stats", &finalize_stats_cpu);
  m.impl("syncbn_normalize", &normalize_cpu_op);
  m.impl("syncbn_grad_sums", &grad_sums_cpu_op);
  m.impl("syncbn_grad_input", &grad_input_cpu_op);
}
