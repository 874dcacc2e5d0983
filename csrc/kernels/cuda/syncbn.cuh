// SyncBatchNorm's CUDA kernels (torch-free). Shapes and packed buffers are
// described in kernels/syncbn_math.h; T is the element type and Acc its
// acc_type. The adapter (csrc/ops/syncbn_ops_cuda.cu) launches them on the current stream.
//
// Launch contracts:
//   welford_planes_kernel, grad_sums_planes_kernel: grid.x = channels, blockDim.x = kPlaneThreads
//     (one block reduces one channel; NC*-contiguous layout, any inner).
//   welford_rows_kernel, grad_sums_rows_kernel: grid.x = ceil(channels / kRowTileChannels),
//     block = (kRowTileChannels, kRowTileRows) (channels-last layout, inner == 1; a warp reads
//     consecutive channels of one row).
//   finalize_kernel, grad_coefficients_kernel: one thread per channel, any 1-D grid.
//   normalize_kernel, grad_input_kernel: grid-stride over all elements, any 1-D grid.
#pragma once

#include <cstdint>

#include "kernels/syncbn_math.h"

namespace fastcomm {
namespace syncbn {
namespace cuda {

constexpr int kPlaneThreads = 256;
constexpr int kRowTileChannels = 32;
constexpr int kRowTileRows = 16;

// Welford state of one thread; merge() is Chan's combination.
struct WelfordState {
  double n;
  double mean;
  double m2;

  __device__ void add(double v) {
    n += 1;
    const double delta = v - mean;
    mean += delta / n;
    m2 += delta * (v - mean);
  }
  __device__ void merge(const WelfordState& o) {
    if (o.n == 0) return;
    const double total = n + o.n;
    const double delta = o.mean - mean;
    mean += delta * (o.n / total);
    m2 += o.m2 + delta * delta * (n * o.n / total);
    n = total;
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

__device__ inline void write_packed_stats(double* packed, ChannelLayout layout, int64_t channel,
                                          const WelfordState& s) {
  packed[1 + channel] = s.n * s.mean;
  packed[1 + layout.channels + channel] = s.m2 + s.n * s.mean * s.mean;
  if (channel == 0) packed[0] = static_cast<double>(layout.per_channel());
}

template <typename T>
__global__ void welford_planes_kernel(const T* x, ChannelLayout layout, double* packed) {
  __shared__ WelfordState states[kPlaneThreads];
  const int64_t channel = blockIdx.x;
  WelfordState s{0, 0, 0};
  for (int64_t j = threadIdx.x; j < layout.per_channel(); j += blockDim.x) {
    const int64_t r = j / layout.inner;
    const int64_t i = j - r * layout.inner;
    s.add(static_cast<double>(static_cast<acc_type<T>>(x[(r * layout.channels + channel) * layout.inner + i])));
  }
  states[threadIdx.x] = s;
  reduce_in_shared(states, threadIdx.x, kPlaneThreads);
  if (threadIdx.x == 0) write_packed_stats(packed, layout, channel, states[0]);
}

template <typename T>
__global__ void welford_rows_kernel(const T* x, ChannelLayout layout, double* packed) {
  __shared__ WelfordState states[kRowTileRows][kRowTileChannels];
  const int64_t channel = static_cast<int64_t>(blockIdx.x) * kRowTileChannels + threadIdx.x;
  WelfordState s{0, 0, 0};
  if (channel < layout.channels) {
    for (int64_t r = threadIdx.y; r < layout.rows; r += kRowTileRows) {
      s.add(static_cast<double>(static_cast<acc_type<T>>(x[r * layout.channels + channel])));
    }
  }
  states[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && channel < layout.channels) {
    WelfordState total = states[0][threadIdx.x];
    for (int k = 1; k < kRowTileRows; ++k) total.merge(states[k][threadIdx.x]);
    write_packed_stats(packed, layout, channel, total);
  }
}

template <typename T>
__global__ void grad_sums_planes_kernel(const T* dy, const T* x, ChannelLayout layout, const acc_type<T>* mean,
                                        double* sums) {
  __shared__ SumState states[kPlaneThreads];
  const int64_t channel = blockIdx.x;
  const acc_type<T> m = mean[channel];
  SumState s{0, 0};
  for (int64_t j = threadIdx.x; j < layout.per_channel(); j += blockDim.x) {
    const int64_t r = j / layout.inner;
    const int64_t offset = (r * layout.channels + channel) * layout.inner + (j - r * layout.inner);
    const double g = static_cast<double>(static_cast<acc_type<T>>(dy[offset]));
    s.dy += g;
    s.dy_xmu += g * static_cast<double>(static_cast<acc_type<T>>(x[offset]) - m);
  }
  states[threadIdx.x] = s;
  reduce_in_shared(states, threadIdx.x, kPlaneThreads);
  if (threadIdx.x == 0) {
    sums[channel] = states[0].dy;
    sums[layout.channels + channel] = states[0].dy_xmu;
  }
}

template <typename T>
__global__ void grad_sums_rows_kernel(const T* dy, const T* x, ChannelLayout layout, const acc_type<T>* mean,
                                      double* sums) {
  __shared__ SumState states[kRowTileRows][kRowTileChannels];
  const int64_t channel = static_cast<int64_t>(blockIdx.x) * kRowTileChannels + threadIdx.x;
  SumState s{0, 0};
  if (channel < layout.channels) {
    const acc_type<T> m = mean[channel];
    for (int64_t r = threadIdx.y; r < layout.rows; r += kRowTileRows) {
      const int64_t offset = r * layout.channels + channel;
      const double g = static_cast<double>(static_cast<acc_type<T>>(dy[offset]));
      s.dy += g;
      s.dy_xmu += g * static_cast<double>(static_cast<acc_type<T>>(x[offset]) - m);
    }
  }
  states[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && channel < layout.channels) {
    SumState total = states[0][threadIdx.x];
    for (int k = 1; k < kRowTileRows; ++k) total.merge(states[k][threadIdx.x]);
    sums[channel] = total.dy;
    sums[layout.channels + channel] = total.dy_xmu;
  }
}

// mean/invstd of every channel from the group's summed packed buffer; updates
// the running statistics (R: their element type; null when not tracked).
template <typename Acc, typename R>
__global__ void finalize_kernel(const double* packed, int64_t channels, double eps, double momentum, Acc* mean,
                                Acc* invstd, R* running_mean, R* running_var) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const ChannelStats s = finalize_channel(packed[0], packed[1 + c], packed[1 + channels + c]);
  mean[c] = static_cast<Acc>(s.mean);
  invstd[c] = static_cast<Acc>(1.0 / sqrt(s.biased_var + eps));
  if (running_mean != nullptr) {
    running_mean[c] = static_cast<R>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * s.mean);
  }
  if (running_var != nullptr) {
    running_var[c] = static_cast<R>((1.0 - momentum) * static_cast<double>(running_var[c]) + momentum * s.unbiased_var);
  }
}

// y = (x - mean_c) * invstd_c * weight_c + bias_c (weight, bias: Acc, may be null).
template <typename T>
__global__ void normalize_kernel(const T* x, T* y, ChannelLayout layout, const acc_type<T>* mean,
                                 const acc_type<T>* invstd, const acc_type<T>* weight, const acc_type<T>* bias) {
  using Acc = acc_type<T>;
  const int64_t total = layout.numel();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (i / layout.inner) % layout.channels;
    const Acc scale = invstd[c] * (weight != nullptr ? weight[c] : Acc(1));
    const Acc shift = bias != nullptr ? bias[c] : Acc(0);
    y[i] = static_cast<T>((static_cast<Acc>(x[i]) - mean[c]) * scale + shift);
  }
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
  const int64_t total = layout.numel();
  const int64_t channels = layout.channels;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (i / layout.inner) % channels;
    dx[i] = static_cast<T>(coefficients[c] * static_cast<Acc>(dy[i]) +
                           coefficients[channels + c] * (static_cast<Acc>(x[i]) - mean[c]) +
                           coefficients[2 * channels + c]);
  }
}

}  // namespace cuda
}  // namespace syncbn
}  // namespace fastcomm
