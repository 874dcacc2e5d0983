// SyncBatchNorm's CUDA kernels (torch-free). Shapes and packed buffers are
// described in kernels/syncbn_math.h; T is the element type and Acc its
// acc_type. The adapter (csrc/ops/syncbn_ops_cuda.cu) launches them on the current stream.
//
// Launch contracts:
//   moments_planes_kernel, grad_sums_planes_kernel: grid = (channels, splits), blockDim.x =
//     kPlaneThreads (NC*-contiguous layout, any inner): block (c, k) reduces channel c over rows
//     [k * rows_per_split, (k + 1) * rows_per_split).
//   moments_rows_kernel, grad_sums_rows_kernel: grid = (ceil(channels / kRowTileChannels), splits),
//     block = (kRowTileChannels, kRowTileRows) (channels-last layout, inner == 1; a warp reads
//     consecutive channels of one row), rows split as above.
//   With one split these write the packed statistics (the sums) themselves; with more, each
//   block writes its partial sums to partials[k * channels + c] and merge_*_kernel (one thread
//   per channel, any 1-D grid) adds them in split order, so the result does not depend on
//   which block ran first.
//   finalize_kernel, grad_coefficients_kernel: one thread per channel, any 1-D grid.
//   normalize_kernel, grad_input_kernel: elementwise (ElementwiseGrid): grid.y strides over
//     runs (the (row, channel) planes where inner > 1, the rows where inner == 1), grid.x *
//     blockDim.x over a run's elements, so a run's channel is found once per run, not per element.
#pragma once

#include <cstdint>

#include "kernels/syncbn_math.h"

namespace fastcomm {
namespace syncbn {
namespace cuda {

constexpr int kPlaneThreads = 256;
constexpr int kRowTileChannels = 32;
constexpr int kRowTileRows = 16;

// One thread's sums of one channel's values: sum x and sum x^2, in float64.
// The packed statistics the group adds up are these sums (their count is the
// layout's), so a per-element Welford update (a float64 division each) would
// keep no precision the packed format keeps.
struct MomentSums {
  double s1;
  double s2;

  __device__ void add(double v) {
    s1 += v;
    s2 += v * v;
  }
  __device__ void merge(const MomentSums& o) {
    s1 += o.s1;
    s2 += o.s2;
  }
};

struct SumState {
  double dy;
  double dy_xmu;

  __device__ void merge(const SumState& o) {
    dy += o.dy;
    dy_xmu += o.dy_xmu;
  }
};

// Tree reduction of `count` (a power of two) states in shared memory, indexed
// by `lane`; every thread of the block must call it. The result is in states[0].
template <typename State>
__device__ void reduce_in_shared(State* states, int lane, int count) {
  for (int stride = count / 2; stride > 0; stride /= 2) {
    __syncthreads();
    if (lane < stride) states[lane].merge(states[lane + stride]);
  }
  __syncthreads();
}

__device__ inline void write_packed_stats(double* packed, ChannelLayout layout, int64_t channel, const MomentSums& s) {
  packed[1 + channel] = s.s1;
  packed[1 + layout.channels + channel] = s.s2;
  if (channel == 0) packed[0] = static_cast<double>(layout.per_channel());
}

__device__ inline void write_grad_sums(double* sums, ChannelLayout layout, int64_t channel, const SumState& s) {
  sums[channel] = s.dy;
  sums[layout.channels + channel] = s.dy_xmu;
}

// Rows [first, end) of this block's split (grid.y).
struct RowRange {
  int64_t first;
  int64_t end;
};

__device__ inline RowRange split_rows(ChannelLayout layout, int64_t rows_per_split) {
  const int64_t first = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t end = first + rows_per_split < layout.rows ? first + rows_per_split : layout.rows;
  return {first, end};
}

// Calls visit(offset) for the elements of `channel` in rows [rows.first,
// rows.end) that this thread of a kPlaneThreads block owns. Planes shorter
// than the block put several rows side by side (each thread keeps one
// position in the plane), so no thread divides per element.
template <typename Visit>
__device__ void for_plane_elements(ChannelLayout layout, int64_t channel, RowRange rows, Visit visit) {
  const int64_t lanes_per_row = layout.inner < kPlaneThreads ? layout.inner : kPlaneThreads;
  const int64_t rows_at_once = kPlaneThreads / lanes_per_row;
  const int64_t lane = threadIdx.x % lanes_per_row;
  const int64_t row_lane = threadIdx.x / lanes_per_row;
  if (row_lane >= rows_at_once) return;  // the block's last threads where inner does not divide it
  for (int64_t r = rows.first + row_lane; r < rows.end; r += rows_at_once) {
    const int64_t plane = (r * layout.channels + channel) * layout.inner;
    for (int64_t i = lane; i < layout.inner; i += lanes_per_row) visit(plane + i);
  }
}

template <typename T>
__global__ void moments_planes_kernel(const T* x, ChannelLayout layout, int64_t rows_per_split, MomentSums* partials,
                                      double* packed) {
  __shared__ MomentSums states[kPlaneThreads];
  const int64_t channel = blockIdx.x;
  MomentSums s{0, 0};
  for_plane_elements(layout, channel, split_rows(layout, rows_per_split),
                     [&](int64_t offset) { s.add(static_cast<double>(static_cast<acc_type<T>>(x[offset]))); });
  states[threadIdx.x] = s;
  reduce_in_shared(states, threadIdx.x, kPlaneThreads);
  if (threadIdx.x != 0) return;
  if (gridDim.y == 1) {
    write_packed_stats(packed, layout, channel, states[0]);
  } else {
    partials[blockIdx.y * layout.channels + channel] = states[0];
  }
}

template <typename T>
__global__ void moments_rows_kernel(const T* x, ChannelLayout layout, int64_t rows_per_split, MomentSums* partials,
                                    double* packed) {
  __shared__ MomentSums states[kRowTileRows][kRowTileChannels];
  const int64_t channel = static_cast<int64_t>(blockIdx.x) * kRowTileChannels + threadIdx.x;
  const RowRange rows = split_rows(layout, rows_per_split);
  MomentSums s{0, 0};
  if (channel < layout.channels) {
    for (int64_t r = rows.first + threadIdx.y; r < rows.end; r += kRowTileRows) {
      s.add(static_cast<double>(static_cast<acc_type<T>>(x[r * layout.channels + channel])));
    }
  }
  states[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || channel >= layout.channels) return;
  MomentSums total = states[0][threadIdx.x];
  for (int k = 1; k < kRowTileRows; ++k) total.merge(states[k][threadIdx.x]);
  if (gridDim.y == 1) {
    write_packed_stats(packed, layout, channel, total);
  } else {
    partials[blockIdx.y * layout.channels + channel] = total;
  }
}

__global__ void merge_moments_kernel(const MomentSums* partials, int64_t splits, ChannelLayout layout, double* packed) {
  const int64_t channel = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (channel >= layout.channels) return;
  MomentSums total{0, 0};
  for (int64_t k = 0; k < splits; ++k) total.merge(partials[k * layout.channels + channel]);
  write_packed_stats(packed, layout, channel, total);
}

template <typename T>
__global__ void grad_sums_planes_kernel(const T* dy, const T* x, ChannelLayout layout, const acc_type<T>* mean,
                                        int64_t rows_per_split, SumState* partials, double* sums) {
  __shared__ SumState states[kPlaneThreads];
  const int64_t channel = blockIdx.x;
  const acc_type<T> m = mean[channel];
  SumState s{0, 0};
  for_plane_elements(layout, channel, split_rows(layout, rows_per_split), [&](int64_t offset) {
    const double g = static_cast<double>(static_cast<acc_type<T>>(dy[offset]));
    s.dy += g;
    s.dy_xmu += g * static_cast<double>(static_cast<acc_type<T>>(x[offset]) - m);
  });
  states[threadIdx.x] = s;
  reduce_in_shared(states, threadIdx.x, kPlaneThreads);
  if (threadIdx.x != 0) return;
  if (gridDim.y == 1) {
    write_grad_sums(sums, layout, channel, states[0]);
  } else {
    partials[blockIdx.y * layout.channels + channel] = states[0];
  }
}

template <typename T>
__global__ void grad_sums_rows_kernel(const T* dy, const T* x, ChannelLayout layout, const acc_type<T>* mean,
                                      int64_t rows_per_split, SumState* partials, double* sums) {
  __shared__ SumState states[kRowTileRows][kRowTileChannels];
  const int64_t channel = static_cast<int64_t>(blockIdx.x) * kRowTileChannels + threadIdx.x;
  const RowRange rows = split_rows(layout, rows_per_split);
  SumState s{0, 0};
  if (channel < layout.channels) {
    const acc_type<T> m = mean[channel];
    for (int64_t r = rows.first + threadIdx.y; r < rows.end; r += kRowTileRows) {
      const int64_t offset = r * layout.channels + channel;
      const double g = static_cast<double>(static_cast<acc_type<T>>(dy[offset]));
      s.dy += g;
      s.dy_xmu += g * static_cast<double>(static_cast<acc_type<T>>(x[offset]) - m);
    }
  }
  states[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || channel >= layout.channels) return;
  SumState total = states[0][threadIdx.x];
  for (int k = 1; k < kRowTileRows; ++k) total.merge(states[k][threadIdx.x]);
  if (gridDim.y == 1) {
    write_grad_sums(sums, layout, channel, total);
  } else {
    partials[blockIdx.y * layout.channels + channel] = total;
  }
}

__global__ void merge_grad_sums_kernel(const SumState* partials, int64_t splits, ChannelLayout layout, double* sums) {
  const int64_t channel = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (channel >= layout.channels) return;
  SumState total{0, 0};
  for (int64_t k = 0; k < splits; ++k) total.merge(partials[k * layout.channels + channel]);
  write_grad_sums(sums, layout, channel, total);
}

// mean/invstd of every channel from the group's summed packed buffer; updates
// the running statistics (R: their element type; null when not tracked).
template <typename Acc, typename R>
__global__ void finalize_kernel(const double* packed, int64_t channels, double eps, double momentum, Acc* mean,
                                Acc* invstd, R* running_mean, R* running_var) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const double n = packed[0];
  if (!(n > 1)) {
    // Too few values over the group (the CPU op raises; here the count is on
    // the device, and reading it would wait for the device): NaN statistics,
    // and the running statistics stay as they were rather than take NaN or
    // inf. fastcomm.nn.SyncBatchNorm raises before calling this, as torch does.
    mean[c] = static_cast<Acc>(::nan(""));
    invstd[c] = static_cast<Acc>(::nan(""));
    return;
  }
  const ChannelStats s = finalize_channel(n, packed[1 + c], packed[1 + channels + c]);
  mean[c] = static_cast<Acc>(s.mean);
  invstd[c] = static_cast<Acc>(1.0 / sqrt(s.biased_var + eps));
  if (running_mean != nullptr) {
    running_mean[c] = static_cast<R>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * s.mean);
  }
  if (running_var != nullptr) {
    running_var[c] = static_cast<R>((1.0 - momentum) * static_cast<double>(running_var[c]) + momentum * s.unbiased_var);
  }
}

// Calls visit(index, channel) for every element of `layout` this thread owns
// (launch contract above): runs of one channel's contiguous elements (a plane)
// where inner > 1, runs of one row's channels where inner == 1.
template <typename Visit>
__device__ void for_each_element(ChannelLayout layout, Visit visit) {
  const bool planes = layout.inner > 1;
  const int64_t runs = planes ? layout.rows * layout.channels : layout.rows;
  const int64_t run_length = planes ? layout.inner : layout.channels;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t run = blockIdx.y; run < runs; run += gridDim.y) {
    const int64_t run_channel = planes ? run % layout.channels : 0;
    const int64_t base = run * run_length;
    for (int64_t i = first; i < run_length; i += stride) visit(base + i, planes ? run_channel : i);
  }
}

// y = (x - mean_c) * invstd_c * weight_c + bias_c (weight, bias: Acc, may be null).
template <typename T>
__global__ void normalize_kernel(const T* x, T* y, ChannelLayout layout, const acc_type<T>* mean,
                                 const acc_type<T>* invstd, const acc_type<T>* weight, const acc_type<T>* bias) {
  using Acc = acc_type<T>;
  for_each_element(layout, [&](int64_t i, int64_t c) {
    const Acc scale = invstd[c] * (weight != nullptr ? weight[c] : Acc(1));
    const Acc shift = bias != nullptr ? bias[c] : Acc(0);
    y[i] = static_cast<T>((static_cast<Acc>(x[i]) - mean[c]) * scale + shift);
  });
}

// coefficients[0..C) = a, [C..2C) = b, [2C..3C) = c of grad_input_coefficients.
template <typename Acc>
__global__ void grad_coefficients_kernel(const double* packed, const double* sums, const Acc* invstd, const Acc* weight,
                                         int64_t channels, Acc* coefficients) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const GradInputCoefficients k = grad_input_coefficients(packed[0], sums[c], sums[channels + c], invstd[c],
                                                          weight != nullptr ? static_cast<double>(weight[c]) : 1.0);
  coefficients[c] = static_cast<Acc>(k.a);
  coefficients[channels + c] = static_cast<Acc>(k.b);
  coefficients[2 * channels + c] = static_cast<Acc>(k.c);
}

template <typename T>
__global__ void grad_input_kernel(const T* dy, const T* x, T* dx, ChannelLayout layout, const acc_type<T>* mean,
                                  const acc_type<T>* coefficients) {
  using Acc = acc_type<T>;
  const int64_t channels = layout.channels;
  for_each_element(layout, [&](int64_t i, int64_t c) {
    dx[i] = static_cast<T>(coefficients[c] * static_cast<Acc>(dy[i]) +
                           coefficients[channels + c] * (static_cast<Acc>(x[i]) - mean[c]) +
                           coefficients[2 * channels + c]);
  });
}

}  // namespace cuda
}  // namespace syncbn
}  // namespace fastcomm
