// int8 blockwise quantization with optional error feedback and stochastic
// rounding, and the fused dequantize-and-sum of all ranks' payloads.
// Format: kernels/compress_format.h.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/compress_format.h"
#include "kernels/cpu/compress_cpu.h"
#include "kernels/cpu/compress_elements.h"

namespace fastcomm {
namespace compress {

namespace {

// Round to nearest even / floor for |v| < 2^22 without a libm call (the build
// targets baseline x86-64, where nearbyint and floor are calls): adding and
// subtracting 1.5 * 2^23 leaves v rounded to an integer in the current
// (nearest-even) rounding mode. Quantized values are within [-129, 129].
inline float round_small(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}
inline int floor_small(float v) {
  const int t = static_cast<int>(v);  // toward zero
  return t - (static_cast<float>(t) > v);
}

template <typename T>
inline __attribute__((always_inline)) void quantize_block(const T* src, float* error, int64_t begin, int64_t end,
                                                          bool stochastic, uint64_t seed, float* scale_out, int8_t* q) {
  using A = Acc<T>;
  auto value = [&](int64_t i) { return static_cast<A>(src[i]) + (error ? static_cast<A>(error[i]) : A(0)); };
  A amax = 0;
  int nan = 0;
  for (int64_t i = begin; i < end; ++i) {
    const A v = value(i);
    const A mag = v < A(0) ? -v : v;
    amax = mag > amax ? mag : amax;
    nan |= v != v;
  }
  const bool finite = !nan && std::isfinite(static_cast<float>(amax));
  if (!finite || amax == A(0)) {
    // All zero: scale 0, and x (so the new error) is 0. Non-finite: scale NaN
    // so the whole block decodes to NaN on every rank (the step is visibly
    // broken), and the error is dropped.
    *scale_out = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = begin; i < end; ++i) q[i] = 0;
    if (error) std::fill(error + begin, error + end, 0.0f);
    return;
  }
  const float scale = static_cast<float>(amax) / static_cast<float>(kInt8Max);
  const float inverse = static_cast<float>(kInt8Max) / static_cast<float>(amax);
  *scale_out = scale;
  for (int64_t i = begin; i < end; ++i) {
    const float x = static_cast<float>(value(i));
    const float scaled = x * inverse;
    // Integer rounding and clamping: compares of random values would be
    // mispredicted branches; integer selects compile to cmov.
    int t = stochastic ? floor_small(scaled + uniform_from_hash(seed, static_cast<uint64_t>(i)))
                       : static_cast<int>(round_small(scaled));
    t = std::min(kInt8Max, std::max(-kInt8Max, t));
    const float r = static_cast<float>(t);
    q[i] = static_cast<int8_t>(t);
    if (error) error[i] = static_cast<float>(value(i) - static_cast<A>(r * scale));
  }
}

template <typename T>
inline __attribute__((always_inline)) void quantize_blocks(const T* src, float* error, int64_t count, int64_t block,
                                                           int64_t b0, int64_t b1, bool stochastic, uint64_t seed,
                                                           float* scales, int8_t* q) {
  for (int64_t b = b0; b < b1; ++b) {
    quantize_block(src, error, b * block, std::min(count, (b + 1) * block), stochastic, seed, &scales[b], q);
  }
}
FASTCOMM_AVX2_VARIANTS(quantize_blocks_best, quantize_blocks)

// out[begin..end) of one block = scale * sum over ranks of q_r * scale_r.
template <typename T>
inline __attribute__((always_inline)) void dequantize_sum_blocks(const uint8_t* gathered, int64_t ranks, int64_t count,
                                                                 int64_t block, int64_t blocks, int64_t bytes,
                                                                 const float* scales, float s, T* o, int64_t b0,
                                                                 int64_t b1) {
  constexpr int64_t kChunk = 1024;  // a float32 accumulator on the stack, vectorizable inner loops
  float sum[kChunk];
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t end = std::min(count, (b + 1) * block);
    for (int64_t begin = b * block; begin < end; begin += kChunk) {
      const int64_t len = std::min(kChunk, end - begin);
      std::fill(sum, sum + len, 0.0f);
      for (int64_t r = 0; r < ranks; ++r) {  // rank order, as on every rank
        const int8_t* q = reinterpret_cast<const int8_t*>(gathered + r * bytes + 4 * blocks) + begin;
        const float scale_r = scales[r * blocks + b];
        for (int64_t j = 0; j < len; ++j) sum[j] += static_cast<float>(q[j]) * scale_r;
      }
      for (int64_t j = 0; j < len; ++j) o[begin + j] = static_cast<T>(sum[j] * s);
    }
  }
}
FASTCOMM_AVX2_VARIANTS(dequantize_sum_blocks_best, dequantize_sum_blocks)

}  // namespace

void int8_quantize_cpu(const void* src, c10::ScalarType dtype, float* error, int64_t count, int64_t block,
                       bool stochastic, uint64_t seed, uint8_t* payload) {
  const int64_t blocks = int8_num_blocks(count, block);
  std::vector<float> scales(blocks);
  int8_t* q = reinterpret_cast<int8_t*>(payload + 4 * blocks);
  FASTCOMM_DISPATCH_GRAD_TYPES(dtype, "int8_quantize", [&] {
    const scalar_t* s = static_cast<const scalar_t*>(src);
    at::parallel_for(0, blocks, std::max<int64_t>(1, kGrain / block), [&](int64_t b0, int64_t b1) {
      quantize_blocks_best<scalar_t>(s, error, count, block, b0, b1, stochastic, seed, scales.data(), q);
    });
  });
  std::memcpy(payload, scales.data(), 4 * blocks);  // the payload may not be 4-byte aligned
}

void int8_dequantize_sum_cpu(const uint8_t* gathered, int64_t ranks, int64_t count, int64_t block, double scale,
                             void* out, c10::ScalarType dtype) {
  const int64_t blocks = int8_num_blocks(count, block);
  const int64_t bytes = int8_payload_bytes(count, block);
  std::vector<float> scales(ranks * blocks);
  for (int64_t r = 0; r < ranks; ++r) std::memcpy(&scales[r * blocks], gathered + r * bytes, 4 * blocks);
  FASTCOMM_DISPATCH_GRAD_TYPES(dtype, "int8_dequantize_sum", [&] {
    scalar_t* o = static_cast<scalar_t*>(out);
    const float s = static_cast<float>(scale);
    at::parallel_for(0, blocks, std::max<int64_t>(1, kGrain / block), [&](int64_t b0, int64_t b1) {
      dequantize_sum_blocks_best<scalar_t>(gathered, ranks, count, block, blocks, bytes, scales.data(), s, o, b0, b1);
    });
  });
}

}  // namespace compress
}  // namespace fastcomm
