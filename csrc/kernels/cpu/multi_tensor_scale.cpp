// Multi-tensor scaled copy: many tensors into one flat buffer (pack) or back
// (unpack), dtype conversion, the scale and a magnitude limit fused into the
// one pass. The fp16 and bf16 hooks use it to compress (with the limit that
// keeps a float16 sum finite) and to decompress.
#include <ATen/Parallel.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include <c10/util/Exception.h>

#include "kernels/cpu/compress_cpu.h"
#include "kernels/cpu/compress_elements.h"
#include "kernels/cpu/float_lanes.h"
#include "kernels/cpu/half_conversions.h"
#include "kernels/cpu/isa.h"

namespace fastcomm {
namespace compress {

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#define FASTCOMM_X86_V3 1
#else
#define FASTCOMM_X86_V3 0
#endif

// Storage types the loops are written over: float16 as _Float16 (one vcvtps2ph /
// vcvtph2ps per 8 elements when compiled for x86-64-v3, which has F16C), bfloat16
// as its bits (round to nearest even, NaN kept: the same bits as c10::BFloat16).
struct BFloat16Bits {
  uint16_t bits;
};

template <typename A>
inline __attribute__((always_inline)) A to_acc(float v) {
  return static_cast<A>(v);
}
template <typename A>
inline __attribute__((always_inline)) A to_acc(double v) {
  return static_cast<A>(v);
}
template <typename A>
inline __attribute__((always_inline)) A to_acc(_Float16 v) {
  return static_cast<A>(static_cast<float>(v));
}
template <typename A>
inline __attribute__((always_inline)) A to_acc(BFloat16Bits v) {
  return static_cast<A>(kernels::bfloat16_bits_to_float(v.bits));
}

template <typename D, typename A>
inline __attribute__((always_inline)) D from_acc(A v) {
  if constexpr (std::is_same_v<D, BFloat16Bits>) {
    return BFloat16Bits{kernels::float_to_bfloat16_bits(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<D, _Float16>) {
    return static_cast<_Float16>(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

template <typename Src, typename Dst>
inline __attribute__((always_inline)) int64_t copy_scaled(const Src* src, Dst* dst, int64_t count, double scale,
                                                          double limit) {
  using A = std::conditional_t<std::is_same_v<Src, double> || std::is_same_v<Dst, double>, double, float>;
  const A s = static_cast<A>(scale);
  if (std::isinf(limit)) {
    for (int64_t i = 0; i < count; ++i) dst[i] = from_acc<Dst>(to_acc<A>(src[i]) * s);
    return 0;
  }
  const A bound = static_cast<A>(limit);
  const A biggest = std::numeric_limits<A>::max();
  int64_t clamped = 0;
  for (int64_t i = 0; i < count; ++i) {
    const A v = to_acc<A>(src[i]) * s;
    const A mag = v < A(0) ? -v : v;
    const bool over = mag > bound && mag <= biggest;  // inf and NaN pass
    clamped += over;
    dst[i] = from_acc<Dst>(over ? (v < A(0) ? -bound : bound) : v);
  }
  return clamped;
}

// The storage type of a gradient dtype, for the loops above.
template <typename F>
void with_storage(c10::ScalarType dtype, F&& f) {
  switch (dtype) {
    case c10::kFloat:
      return f(float{});
    case c10::kDouble:
      return f(double{});
    case c10::kHalf:
      return f(_Float16{});
    case c10::kBFloat16:
      return f(BFloat16Bits{});
    default:
      TORCH_CHECK(false, "fastcomm compress_multi_tensor_pack: unsupported dtype ", dtype);
  }
}

template <typename Src, typename Dst>
int64_t copy_baseline(const void* src, void* dst, int64_t count, double scale, double limit) {
  return copy_scaled(static_cast<const Src*>(src), static_cast<Dst*>(dst), count, scale, limit);
}

#if FASTCOMM_X86_V3
// GCC 12 does not vectorize _Float16 conversions: float32 <-> float16, the fp16
// hook's two passes, are written with F16C intrinsics, 8 elements at a time;
// the tail and every other pair of types go through copy_scaled.
__attribute__((target("arch=x86-64-v3"))) int64_t float_to_half_v3(const float* src, _Float16* dst, int64_t count,
                                                                   float scale, float limit) {
  using L = kernels::Lanes8;
  const __m256 s = L::splat(scale);
  const __m256 bound = L::splat(limit);
  const __m256 biggest = L::splat(std::numeric_limits<float>::max());
  __m256i clamped = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 v = L::mul(L::load(src + i), s);
    const __m256 over = L::over_limit(v, bound, biggest);
    const __m128i half = _mm256_cvtps_ph(L::clamp(v, bound, over), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), half);
    clamped = _mm256_sub_epi32(clamped, _mm256_castps_si256(over));  // over lanes are -1
  }
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), clamped);
  int64_t total = 0;
  for (int32_t c : lanes) total += c;
  return total + copy_scaled(src + i, dst + i, count - i, scale, limit);
}

__attribute__((target("arch=x86-64-v3"))) void half_to_float_v3(const _Float16* src, float* dst, int64_t count,
                                                                float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(v, s));
  }
  copy_scaled(src + i, dst + i, count - i, scale, std::numeric_limits<double>::infinity());
}

template <typename Src, typename Dst>
__attribute__((target("arch=x86-64-v3"))) int64_t copy_v3(const void* src, void* dst, int64_t count, double scale,
                                                          double limit) {
  if constexpr (std::is_same_v<Src, float> && std::is_same_v<Dst, _Float16>) {
    return float_to_half_v3(static_cast<const float*>(src), static_cast<_Float16*>(dst), count,
                            static_cast<float>(scale),
                            std::isinf(limit) ? std::numeric_limits<float>::infinity() : static_cast<float>(limit));
  } else if constexpr (std::is_same_v<Src, _Float16> && std::is_same_v<Dst, float>) {
    if (std::isinf(limit)) {
      half_to_float_v3(static_cast<const _Float16*>(src), static_cast<float*>(dst), count, static_cast<float>(scale));
      return 0;
    }
  }
  return copy_scaled(static_cast<const Src*>(src), static_cast<Dst*>(dst), count, scale, limit);
}
#endif

bool use_v3() {
  return kernels::isa_enabled(kernels::Isa::Avx2);
}

int64_t copy_piece(const ScaledCopy& p, int64_t begin, int64_t end, double scale, double limit) {
  int64_t clamped = 0;
  with_storage(p.src_dtype, [&](auto src_type) {
    using Src = decltype(src_type);
    with_storage(p.dst_dtype, [&](auto dst_type) {
      using Dst = decltype(dst_type);
      const void* src = static_cast<const Src*>(p.src) + begin;
      void* dst = static_cast<Dst*>(p.dst) + begin;
#if FASTCOMM_X86_V3
      if (use_v3()) {
        clamped = copy_v3<Src, Dst>(src, dst, end - begin, scale, limit);
        return;
      }
#endif
      clamped = copy_baseline<Src, Dst>(src, dst, end - begin, scale, limit);
    });
  });
  return clamped;
}

}  // namespace

int64_t scaled_copy_serial(const ScaledCopy& piece, double scale, double limit) {
  return copy_piece(piece, 0, piece.count, scale, limit);
}

int64_t scaled_copy_cpu(const std::vector<ScaledCopy>& pieces, double scale, double limit) {
  // Tasks of at most kGrain elements across all pieces, so one large tensor
  // and many small ones spread over the threads alike.
  struct Task {
    size_t piece;
    int64_t begin, end;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (int64_t b = 0; b < pieces[i].count; b += kGrain)
      tasks.push_back({i, b, std::min(pieces[i].count, b + kGrain)});
  }
  std::vector<int64_t> clamped(tasks.size(), 0);
  at::parallel_for(0, static_cast<int64_t>(tasks.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      clamped[t] = copy_piece(pieces[tasks[t].piece], tasks[t].begin, tasks[t].end, scale, limit);
  });
  int64_t total = 0;
  for (int64_t c : clamped) total += c;
  return total;
}

}  // namespace compress
}  // namespace fastcomm
