// CUDA kernels behind the fastcomm::compress_* operators; the CPU kernels
// (kernels/cpu/compress_cpu.h) state the contracts, which these follow: the
// same formats (kernels/compress_format.h), the same float32 arithmetic, and
// rank-ordered sums, so every rank gets the same bucket. Torch-free apart from
// the element types the adapter (csrc/ops/compress_ops_cuda.cu) instantiates them with.
#pragma once

#include <cstdint>

#include "kernels/compress_format.h"

namespace fastcomm {
namespace compress {
namespace cuda {

constexpr int kThreads = 256;

// dst = src * scale, finite values beyond +-limit clamped and counted into *clamped.
template <typename Src, typename Dst, typename Acc>
__global__ void scaled_copy_kernel(const Src* src, Dst* dst, int64_t count, Acc scale, Acc limit,
                                   unsigned long long* clamped) {
  unsigned long long mine = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    Acc v = static_cast<Acc>(src[i]) * scale;
    const Acc mag = v < Acc(0) ? -v : v;
    if (mag > limit && isfinite(static_cast<double>(mag))) {
      v = v < Acc(0) ? -limit : limit;
      ++mine;
    }
    dst[i] = static_cast<Dst>(v);
  }
  if (mine && clamped) atomicAdd(clamped, mine);
}

// One CUDA block per quantization block: max |x| by a shared-memory reduction,
// then quantize (and update the error) with the same float32 steps as the CPU.
template <typename T, typename Acc>
__global__ void int8_quantize_kernel(const T* src, float* error, int64_t count, int64_t block, bool stochastic,
                                     uint64_t seed, float* scales, int8_t* q) {
  __shared__ float amax_shared[kThreads];
  __shared__ int nan_shared;
  const int64_t begin = blockIdx.x * block;
  const int64_t end = begin + block < count ? begin + block : count;
  float amax = 0.0f;
  int nan = 0;
  if (threadIdx.x == 0) nan_shared = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float x = static_cast<float>(static_cast<Acc>(src[i]) + (error ? static_cast<Acc>(error[i]) : Acc(0)));
    amax = fmaxf(amax, fabsf(x));
    nan |= isnan(x);
  }
  amax_shared[threadIdx.x] = amax;
  __syncthreads();
  if (nan) atomicOr(&nan_shared, 1);
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      amax_shared[threadIdx.x] = fmaxf(amax_shared[threadIdx.x], amax_shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const float block_max = amax_shared[0];
  const bool finite = !nan_shared && isfinite(block_max);
  if (!finite || block_max == 0.0f) {
    if (threadIdx.x == 0) scales[blockIdx.x] = finite ? 0.0f : __int_as_float(0x7fc00000);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      q[i] = 0;
      if (error) error[i] = 0.0f;
    }
    return;
  }
  const float scale = block_max / static_cast<float>(kInt8Max);
  const float inverse = static_cast<float>(kInt8Max) / block_max;
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const Acc value = static_cast<Acc>(src[i]) + (error ? static_cast<Acc>(error[i]) : Acc(0));
    const float scaled = __fmul_rn(static_cast<float>(value), inverse);
    float r = stochastic ? floorf(__fadd_rn(scaled, uniform_from_hash(seed, static_cast<uint64_t>(i)))) : rintf(scaled);
    r = fminf(fmaxf(r, -static_cast<float>(kInt8Max)), static_cast<float>(kInt8Max));
    q[i] = static_cast<int8_t>(r);
    if (error) error[i] = static_cast<float>(value - static_cast<Acc>(__fmul_rn(r, scale)));
  }
}

template <typename T>
__global__ void int8_dequantize_sum_kernel(const uint8_t* gathered, int64_t ranks, int64_t count, int64_t block,
                                           int64_t bytes, float scale, T* out) {
  const int64_t blocks = int8_num_blocks(count, block);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int64_t r = 0; r < ranks; ++r) {
      const uint8_t* row = gathered + r * bytes;
      const float s = reinterpret_cast<const float*>(row)[i / block];
      const int8_t v = reinterpret_cast<const int8_t*>(row + 4 * blocks)[i];
      sum = __fadd_rn(sum, __fmul_rn(static_cast<float>(v), s));
    }
    out[i] = static_cast<T>(__fmul_rn(sum, scale));
  }
}

// Adds one rank's (values, indices) into the float32 accumulator; indices of a
// rank are distinct, so no atomics; ranks go one launch after another, in order.
__global__ void topk_scatter_add_kernel(const int32_t* words, int64_t k, int64_t count, float* acc) {
  const float* values = reinterpret_cast<const float*>(words);
  const int32_t* indices = words + k;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < k; j += int64_t(gridDim.x) * blockDim.x) {
    const int32_t i = indices[j];
    if (i >= 0 && i < count) acc[i] = __fadd_rn(acc[i], values[j]);  // the adapter checked the range
  }
}

template <typename T>
__global__ void scale_into_kernel(const float* acc, int64_t count, float scale, T* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = static_cast<T>(__fmul_rn(acc[i], scale));
  }
}

// One thread per payload byte (8 elements). abs_sum: sum |x| over the bucket
// (float64, on the device), from which every thread derives the same scale.
template <typename T>
__global__ void sign_compress_kernel(const T* src, float* error, int64_t count, const double* abs_sum,
                                     uint8_t* payload) {
  const float scale = count > 0 ? static_cast<float>(*abs_sum / static_cast<double>(count)) : 0.0f;
  const bool finite = isfinite(scale);
  const int64_t bytes = (count + 7) / 8;
  if (blockIdx.x == 0 && threadIdx.x == 0) *reinterpret_cast<float*>(payload) = scale;
  for (int64_t byte = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; byte < bytes;
       byte += int64_t(gridDim.x) * blockDim.x) {
    uint8_t packed = 0;
    for (int bit = 0; bit < 8 && byte * 8 + bit < count; ++bit) {
      const int64_t i = byte * 8 + bit;
      const float x = __fadd_rn(static_cast<float>(src[i]), error ? error[i] : 0.0f);
      const bool positive = x >= 0.0f;
      packed |= static_cast<uint8_t>(positive) << bit;
      if (error) error[i] = finite ? __fsub_rn(x, positive ? scale : -scale) : 0.0f;
    }
    payload[4 + byte] = packed;
  }
}

template <typename T>
__global__ void sign_sum_kernel(const uint8_t* gathered, int64_t ranks, int64_t count, int64_t bytes, float scale,
                                T* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int64_t r = 0; r < ranks; ++r) {
      const uint8_t* row = gathered + r * bytes;
      const float s = *reinterpret_cast<const float*>(row);
      sum = __fadd_rn(sum, (row[4 + i / 8] >> (i % 8)) & 1 ? s : -s);
    }
    out[i] = static_cast<T>(__fmul_rn(sum, scale));
  }
}

}  // namespace cuda
}  // namespace compress
}  // namespace fastcomm
