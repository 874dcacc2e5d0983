// Adapter: the CUDA implementations of the fastcomm::syncbn_* operators
// (schemas in csrc/ops/syncbn_ops.cpp), registered with the torch dispatcher
// at load time of _C. Arguments are checked exactly as on CPU (ops/syncbn_ops.h);
// kernels run on the current stream and nothing here waits for the device.
#include <algorithm>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "core/errors.h"
#include "kernels/cuda/syncbn.cuh"
#include "ops/syncbn_ops.h"

namespace fastcomm {
namespace syncbn {
namespace cuda {

namespace {

constexpr int kElementwiseThreads = 256;
constexpr int kChannelThreads = 128;

unsigned elementwise_blocks(int64_t numel) {
  const int64_t wanted = (numel + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(wanted, 65535)));
}

unsigned channel_blocks(int64_t channels) {
  return static_cast<unsigned>((channels + kChannelThreads - 1) / kChannelThreads);
}

// `t` converted to the statistics dtype (weights may be float16 or float32 beside a half input), or undefined.
at::Tensor as_acc_or_undefined(const std::optional<at::Tensor>& t, at::ScalarType acc) {
  return given(t) ? t->to(acc).contiguous() : at::Tensor();
}

template <typename Acc>
const Acc* ptr_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<Acc>() : nullptr;
}

at::Tensor local_stats_cuda(const at::Tensor& input) {
  constexpr const char* op = "syncbn_local_stats";
  const LaidOut in = lay_out(input, op);
  c10::cuda::CUDAGuard guard(input.device());
  at::Tensor packed = at::zeros({in.layout.packed_stats_size()}, input.options().dtype(at::kDouble));
  if (in.layout.per_channel() == 0) return packed;  // count 0, sums 0: joins the collective as a no-op
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), op, [&] {
    const scalar_t* x = in.tensor.const_data_ptr<scalar_t>();
    if (in.layout.inner == 1) {
      const dim3 block(kRowTileChannels, kRowTileRows);
      const unsigned grid = static_cast<unsigned>((in.layout.channels + kRowTileChannels - 1) / kRowTileChannels);
      welford_rows_kernel<scalar_t><<<grid, block, 0, stream>>>(x, in.layout, packed.data_ptr<double>());
    } else {
      welford_planes_kernel<scalar_t><<<static_cast<unsigned>(in.layout.channels), kPlaneThreads, 0, stream>>>(
          x, in.layout, packed.data_ptr<double>());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return packed;
}

std::tuple<at::Tensor, at::Tensor> finalize_stats_cuda(const at::Tensor& packed, double eps, double momentum,
                                                       const std::optional<at::Tensor>& running_mean,
                                                       const std::optional<at::Tensor>& running_var,
                                                       at::ScalarType stats_dtype) {
  constexpr const char* op = "syncbn_finalize_stats";
  const int64_t channels = check_finalize_stats_args(packed, running_mean, running_var, stats_dtype, op);
  const bool tracked_mean = given(running_mean);
  const bool tracked_var = given(running_var);
  c10::cuda::CUDAGuard guard(packed.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor sums = packed.contiguous();
  at::Tensor mean = at::empty({channels}, packed.options().dtype(stats_dtype));
  at::Tensor invstd = at::empty({channels}, packed.options().dtype(stats_dtype));
  const at::ScalarType running_dtype =
      tracked_mean ? running_mean->scalar_type() : (tracked_var ? running_var->scalar_type() : stats_dtype);
  AT_DISPATCH_FLOATING_TYPES(stats_dtype, op, [&] {
    using Acc = scalar_t;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, running_dtype, op, [&] {
      using R = scalar_t;
      finalize_kernel<Acc, R><<<channel_blocks(channels), kChannelThreads, 0, stream>>>(
          sums.const_data_ptr<double>(), channels, eps, momentum, mean.data_ptr<Acc>(), invstd.data_ptr<Acc>(),
          tracked_mean ? running_mean->data_ptr<R>() : nullptr, tracked_var ? running_var->data_ptr<R>() : nullptr);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return {mean, invstd};
}

at::Tensor normalize_cuda(const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
                          const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias) {
  constexpr const char* op = "syncbn_normalize";
  const LaidOut in = lay_out(input, op);
  check_normalize_args(in, mean, invstd, weight, bias, op);
  const at::ScalarType acc = stats_dtype_for(input.scalar_type());
  c10::cuda::CUDAGuard guard(input.device());
  at::Tensor output = at::empty_like(in.tensor);
  if (output.numel() == 0) return output;
  const at::Tensor w = as_acc_or_undefined(weight, acc);
  const at::Tensor b = as_acc_or_undefined(bias, acc);
  const at::Tensor m = mean.contiguous();
  const at::Tensor inv = invstd.contiguous();
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), op, [&] {
    using Acc = acc_type<scalar_t>;
    normalize_kernel<scalar_t><<<elementwise_blocks(output.numel()), kElementwiseThreads, 0, stream>>>(
        in.tensor.const_data_ptr<scalar_t>(), output.data_ptr<scalar_t>(), in.layout, m.const_data_ptr<Acc>(),
        inv.const_data_ptr<Acc>(), ptr_or_null<Acc>(w), ptr_or_null<Acc>(b));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return output;
}

at::Tensor grad_sums_cuda(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean) {
  constexpr const char* op = "syncbn_grad_sums";
  const LaidOut in = lay_out(input, op);
  const at::Tensor dy = in_layout_of(grad_output, in, op);
  check_grad_sums_args(in, mean, op);
  c10::cuda::CUDAGuard guard(input.device());
  at::Tensor sums = at::zeros({2 * in.layout.channels}, input.options().dtype(at::kDouble));
  if (in.layout.per_channel() == 0) return sums;
  const at::Tensor m = mean.contiguous();
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), op, [&] {
    using Acc = acc_type<scalar_t>;
    const scalar_t* g = dy.const_data_ptr<scalar_t>();
    const scalar_t* x = in.tensor.const_data_ptr<scalar_t>();
    if (in.layout.inner == 1) {
      const dim3 block(kRowTileChannels, kRowTileRows);
      const unsigned grid = static_cast<unsigned>((in.layout.channels + kRowTileChannels - 1) / kRowTileChannels);
      grad_sums_rows_kernel<scalar_t>
          <<<grid, block, 0, stream>>>(g, x, in.layout, m.const_data_ptr<Acc>(), sums.data_ptr<double>());
    } else {
      grad_sums_planes_kernel<scalar_t><<<static_cast<unsigned>(in.layout.channels), kPlaneThreads, 0, stream>>>(
          g, x, in.layout, m.const_data_ptr<Acc>(), sums.data_ptr<double>());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return sums;
}

at::Tensor grad_input_cuda(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
                           const at::Tensor& invstd, const std::optional<at::Tensor>& weight, const at::Tensor& sums,
                           const at::Tensor& packed) {
  constexpr const char* op = "syncbn_grad_input";
  const LaidOut in = lay_out(input, op);
  const at::Tensor dy = in_layout_of(grad_output, in, op);
  check_grad_input_args(in, mean, invstd, weight, sums, packed, op);
  const int64_t channels = in.layout.channels;
  const at::ScalarType acc = stats_dtype_for(input.scalar_type());
  c10::cuda::CUDAGuard guard(input.device());
  at::Tensor grad_input = at::empty_like(in.tensor);
  if (grad_input.numel() == 0) return grad_input;
  const at::Tensor w = as_acc_or_undefined(weight, acc);
  const at::Tensor m = mean.contiguous();
  const at::Tensor inv = invstd.contiguous();
  const at::Tensor s = sums.contiguous();
  const at::Tensor p = packed.contiguous();
  at::Tensor coefficients = at::empty({3 * channels}, input.options().dtype(acc));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), op, [&] {
    using Acc = acc_type<scalar_t>;
    grad_coefficients_kernel<Acc><<<channel_blocks(channels), kChannelThreads, 0, stream>>>(
        p.const_data_ptr<double>(), s.const_data_ptr<double>(), inv.const_data_ptr<Acc>(), ptr_or_null<Acc>(w),
        channels, coefficients.data_ptr<Acc>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    grad_input_kernel<scalar_t><<<elementwise_blocks(grad_input.numel()), kElementwiseThreads, 0, stream>>>(
        dy.const_data_ptr<scalar_t>(), in.tensor.const_data_ptr<scalar_t>(), grad_input.data_ptr<scalar_t>(), in.layout,
        m.const_data_ptr<Acc>(), coefficients.const_data_ptr<Acc>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return grad_input;
}

}  // namespace

}  // namespace cuda
}  // namespace syncbn
}  // namespace fastcomm

TORCH_LIBRARY_IMPL(fastcomm, CUDA, m) {
  using namespace fastcomm::syncbn::cuda;
  m.impl("syncbn_local_stats", &local_stats_cuda);
  m.impl("syncbn_finalize_stats", &finalize_stats_cuda);
  m.impl("syncbn_normalize", &normalize_cuda);
  m.impl("syncbn_grad_sums", &grad_sums_cuda);
  m.impl("syncbn_grad_input", &grad_input_cuda);
}
