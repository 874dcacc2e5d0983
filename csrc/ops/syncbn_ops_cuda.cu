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

// Each statistics block reads at least this many elements, so a split's
// partial sums (and their merge) cost little beside its reads.
constexpr int64_t kMinBlockElements = 16384;

unsigned channel_blocks(int64_t channels) {
  return static_cast<unsigned>((channels + kChannelThreads - 1) / kChannelThreads);
}

// How the statistics kernels split each channel's rows over grid.y: into
// enough parts that the launch has about two blocks per SM (a 64-channel
// batch would otherwise run on 64 blocks, or on 2 channels-last), each part at
// least min_rows rows.
struct RowSplit {
  int64_t splits;
  int64_t rows_per_split;
};

RowSplit split_rows_over_sms(int64_t channel_blocks, int64_t rows, int64_t min_rows) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t wanted = (2 * sms + channel_blocks - 1) / channel_blocks;
  const int64_t most = std::max<int64_t>(1, rows / std::max<int64_t>(1, min_rows));
  const int64_t splits = std::max<int64_t>(1, std::min({wanted, most, int64_t{65535}}));
  const int64_t rows_per_split = (rows + splits - 1) / splits;
  return {(rows + rows_per_split - 1) / rows_per_split, rows_per_split};  // no empty split
}

// The launch of a statistics kernel pair (moments or grad sums): the rows
// kernel where inner == 1, the planes kernel otherwise, its grid, its split,
// and where the split has several parts the buffer of their partial sums
// (two float64 per channel and part).
struct StatsLaunch {
  bool rows;
  dim3 grid;
  RowSplit split;
  at::Tensor partials;  // undefined with one part
};

StatsLaunch stats_launch(const ChannelLayout& layout, const at::TensorOptions& doubles) {
  StatsLaunch launch;
  launch.rows = layout.inner == 1;
  const int64_t x_blocks = launch.rows ? (layout.channels + kRowTileChannels - 1) / kRowTileChannels : layout.channels;
  launch.split = split_rows_over_sms(
      x_blocks, layout.rows, launch.rows ? kMinBlockElements / kRowTileChannels : kMinBlockElements / layout.inner);
  launch.grid = dim3(static_cast<unsigned>(x_blocks), static_cast<unsigned>(launch.split.splits));
  if (launch.split.splits > 1) launch.partials = at::empty({launch.split.splits * layout.channels * 2}, doubles);
  return launch;
}

template <typename State>
State* partials_or_null(const StatsLaunch& launch) {
  return launch.partials.defined() ? reinterpret_cast<State*>(launch.partials.data_ptr<double>()) : nullptr;
}

// The grid of normalize_kernel and grad_input_kernel (syncbn.cuh's
// for_each_element): a block as wide as a run (up to kElementwiseThreads
// threads), grid.x blocks along a run, grid.y over the runs.
struct ElementwiseLaunch {
  dim3 grid;
  dim3 block;
};

ElementwiseLaunch elementwise_launch(const ChannelLayout& layout) {
  const bool planes = layout.inner > 1;
  const int64_t runs = planes ? layout.rows * layout.channels : layout.rows;
  const int64_t run_length = planes ? layout.inner : layout.channels;
  const int64_t threads = std::min<int64_t>(kElementwiseThreads, (run_length + 31) / 32 * 32);
  const int64_t along = std::min<int64_t>((run_length + threads - 1) / threads, 65535);
  const int64_t across = std::max<int64_t>(1, std::min<int64_t>(runs, 65535));
  return {dim3(static_cast<unsigned>(along), static_cast<unsigned>(across)), dim3(static_cast<unsigned>(threads))};
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
  const ChannelLayout& layout = in.layout;
  const StatsLaunch launch = stats_launch(layout, packed.options());
  const RowSplit split = launch.split;
  MomentSums* partial = partials_or_null<MomentSums>(launch);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), op, [&] {
    const scalar_t* x = in.tensor.const_data_ptr<scalar_t>();
    if (launch.rows) {
      moments_rows_kernel<scalar_t><<<launch.grid, dim3(kRowTileChannels, kRowTileRows), 0, stream>>>(
          x, layout, split.rows_per_split, partial, packed.data_ptr<double>());
    } else {
      moments_planes_kernel<scalar_t><<<launch.grid, kPlaneThreads, 0, stream>>>(x, layout, split.rows_per_split,
                                                                                 partial, packed.data_ptr<double>());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  if (split.splits > 1) {
    merge_moments_kernel<<<channel_blocks(layout.channels), kChannelThreads, 0, stream>>>(partial, split.splits, layout,
                                                                                          packed.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
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
    const ElementwiseLaunch launch = elementwise_launch(in.layout);
    normalize_kernel<scalar_t><<<launch.grid, launch.block, 0, stream>>>(
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
  const ChannelLayout& layout = in.layout;
  const StatsLaunch launch = stats_launch(layout, sums.options());
  const RowSplit split = launch.split;
  SumState* partial = partials_or_null<SumState>(launch);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), op, [&] {
    using Acc = acc_type<scalar_t>;
    const scalar_t* g = dy.const_data_ptr<scalar_t>();
    const scalar_t* x = in.tensor.const_data_ptr<scalar_t>();
    if (launch.rows) {
      grad_sums_rows_kernel<scalar_t><<<launch.grid, dim3(kRowTileChannels, kRowTileRows), 0, stream>>>(
          g, x, layout, m.const_data_ptr<Acc>(), split.rows_per_split, partial, sums.data_ptr<double>());
    } else {
      grad_sums_planes_kernel<scalar_t><<<launch.grid, kPlaneThreads, 0, stream>>>(
          g, x, layout, m.const_data_ptr<Acc>(), split.rows_per_split, partial, sums.data_ptr<double>());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  if (split.splits > 1) {
    merge_grad_sums_kernel<<<channel_blocks(layout.channels), kChannelThreads, 0, stream>>>(
        partial, split.splits, layout, sums.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
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
    const ElementwiseLaunch launch = elementwise_launch(in.layout);
    grad_input_kernel<scalar_t><<<launch.grid, launch.block, 0, stream>>>(
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
