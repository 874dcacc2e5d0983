// The low-precision sum of the fp16/bf16 hooks in one pass (compress_cpu.h,
// low_precision_sum_cpu): every source scaled, clamped and rounded to the wire
// dtype, the wire values summed in float32 in source order, the sum rounded
// once and widened into dst, without the wire values ever leaving registers.
//
// It must equal, bit for bit, the composition the segment path runs
// (algorithms/allreduce_low_precision_shm.cpp): scaled_copy_cpu into the wire
// dtype, kernels::reduce (float32 sum in source order, rounded once), then
// scaled_copy_cpu back with scale 1. float32 sources on x86-64-v4 (AVX-512,
// 16 lanes) or v3 (AVX2 + F16C, 8 lanes) take the vector loops below, which
// perform the same float operations in the same order; everything else
// (float64/float16/bfloat16 sources, other CPUs, a capped ISA) runs that
// composition itself, a block at a time. tests/unit/test_low_precision_sum.py
// checks every level against the definition in plain torch. The vector loops
// exist where float_lanes.h provides the lanes (FASTCOMM_HAS_FLOAT_LANES).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <c10/util/Exception.h>

#include "kernels/cpu/compress_cpu.h"
#include "kernels/cpu/float_lanes.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/reduce.h"

namespace fastcomm {
namespace compress {

namespace {

// Elements per block of the composed path: n wire blocks stay in L1.
constexpr int64_t kComposedBlock = 2048;

void sum_composed(const void* const* srcs, int n, c10::ScalarType dtype, c10::ScalarType wire, double scale,
                  double limit, void* dst, int64_t count, int64_t* clamped) {
  const size_t element = c10::elementSize(dtype), wire_element = c10::elementSize(wire);
  std::vector<char> blocks(static_cast<size_t>(n) * kComposedBlock * wire_element);
  std::vector<const void*> wire_srcs(n);
  for (int64_t at = 0; at < count; at += kComposedBlock) {
    const int64_t len = std::min(kComposedBlock, count - at);
    for (int q = 0; q < n; ++q) {
      char* block = blocks.data() + static_cast<size_t>(q) * kComposedBlock * wire_element;
      clamped[q] +=
          scaled_copy_serial({static_cast<const char*>(srcs[q]) + at * element, dtype, block, wire, len}, scale, limit);
      wire_srcs[q] = block;
    }
    void* sum = blocks.data();  // the first block: reduce allows dst == srcs[0]
    kernels::reduce(wire, ReduceKind::Sum, wire_srcs.data(), n, sum, len);
    scaled_copy_serial({sum, wire, static_cast<char*>(dst) + at * element, dtype, len}, 1.0,
                       std::numeric_limits<double>::infinity());
  }
}

#if FASTCOMM_HAS_FLOAT_LANES
// GCC 12's avx512fintrin.h leaves the pass-through operand of
// _mm512_cvtps_ph/_mm512_cvtph_ps "undefined" on purpose, and warns about it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// sum_float_lanes is always inlined into a function of its own target: its
// vector arguments never cross a call whose ABI would differ.
#pragma GCC diagnostic ignored "-Wpsabi"

// float32 -> wire -> float32 per lane with the clamp of copy_scaled (finite
// values beyond +-limit become +-limit, inf and NaN pass): float_lanes.h, one
// loop per vector width; kClamp false when the limit is inf.
using kernels::Lanes16;
using kernels::Lanes8;

// A vector rounded to the wire dtype and widened again.
template <typename L, bool kHalf>
inline __attribute__((always_inline)) typename L::Vec round_to_wire(typename L::Vec v) {
  return kHalf ? L::through_half(v) : L::through_bfloat16(v);
}

// One vector of a source through the wire dtype: scaled, clamped (counted
// into `clamped`), rounded and widened again.
template <typename L, bool kHalf, bool kClamp>
inline __attribute__((always_inline)) typename L::Vec through_wire(typename L::Vec v, typename L::Vec s,
                                                                   typename L::Vec bound, typename L::Vec biggest,
                                                                   int64_t& clamped) {
  v = L::mul(v, s);
  if constexpr (kClamp) {
    const auto over = L::over_limit(v, bound, biggest);
    clamped += L::count(over);
    v = L::clamp(v, bound, over);
  }
  return round_to_wire<L, kHalf>(v);
}

// One source's pass over one block of whole vectors: its values through the
// wire dtype, added to the running sum in `acc` (kFirst: starting it); kLast
// stores the rounded sum into dst instead. Returns how many it clamped (a
// register counter: per-source counts in memory slow the loop down).
template <typename L, bool kHalf, bool kClamp, bool kFirst, bool kLast>
inline __attribute__((always_inline)) int64_t add_source_block(const float* src, float scale, float limit, float* acc,
                                                               float* dst, int64_t len) {
  using Vec = typename L::Vec;
  const Vec s = L::splat(scale), bound = L::splat(limit), biggest = L::splat(std::numeric_limits<float>::max());
  int64_t clamped = 0;
  for (int64_t j = 0; j < len; j += L::kWidth) {
    Vec sum = through_wire<L, kHalf, kClamp>(L::load(src + j), s, bound, biggest, clamped);
    if constexpr (!kFirst) sum = L::add(L::load(acc + j), sum);
    if constexpr (kLast) {
      L::store(dst + j, round_to_wire<L, kHalf>(sum));
    } else {
      L::store(acc + j, sum);
    }
  }
  return clamped;
}

// N sources in one pass without a running sum: every stream is read at once,
// as the float32 reduction reads them, and each vector's sum is built in a
// register in rank order ((w0 + w1) + w2 ...: the same float32 additions as
// the block-by-block loop, so the same bits). Per-source clamp counts stay in
// registers (an unrolled array).
template <typename L, bool kHalf, bool kClamp, int N>
inline __attribute__((always_inline)) void sum_fused(const float* const* srcs, float scale, float limit, float* dst,
                                                     int64_t len, int64_t* clamped) {
  using Vec = typename L::Vec;
  const Vec s = L::splat(scale), bound = L::splat(limit), biggest = L::splat(std::numeric_limits<float>::max());
  int64_t counts[N] = {};
  for (int64_t j = 0; j < len; j += L::kWidth) {
    Vec sum = through_wire<L, kHalf, kClamp>(L::load(srcs[0] + j), s, bound, biggest, counts[0]);
#pragma GCC unroll 8
    for (int q = 1; q < N; ++q) {
      sum = L::add(sum, through_wire<L, kHalf, kClamp>(L::load(srcs[q] + j), s, bound, biggest, counts[q]));
    }
    L::store(dst + j, round_to_wire<L, kHalf>(sum));
  }
  for (int q = 0; q < N; ++q) clamped[q] += counts[q];
}

// One source, or more than sum_float_lanes fuses: block by block (the running
// sum stays in L1), source by source in rank order.
template <typename L, bool kHalf, bool kClamp>
inline __attribute__((always_inline)) void sum_blocks(const float* const* srcs, int n, float scale, float limit,
                                                      float* dst, int64_t whole, int64_t* clamped) {
  constexpr int64_t kBlock = 1024;  // floats of running sum (4 KiB)
  alignas(64) float acc[kBlock];
  for (int64_t i = 0; i < whole; i += kBlock) {
    const int64_t len = std::min(kBlock, whole - i);
    if (n == 1) {
      clamped[0] += add_source_block<L, kHalf, kClamp, true, true>(srcs[0] + i, scale, limit, acc, dst + i, len);
      continue;
    }
    clamped[0] += add_source_block<L, kHalf, kClamp, true, false>(srcs[0] + i, scale, limit, acc, dst + i, len);
    for (int q = 1; q + 1 < n; ++q) {
      clamped[q] += add_source_block<L, kHalf, kClamp, false, false>(srcs[q] + i, scale, limit, acc, dst + i, len);
    }
    clamped[n - 1] += add_source_block<L, kHalf, kClamp, false, true>(srcs[n - 1] + i, scale, limit, acc, dst + i, len);
  }
}

// Two to eight sources (ranks of a host) in one loop (sum_fused: block by
// block reads every 4 KiB page of each source cold, one source at a time,
// which streams from memory at a fraction of the one loop's rate;
// pytest benchmarks/kernels/test_compression.py); others block by block
// (sum_blocks), as reduce.cpp's float32 sum. The tail that fills no whole
// vector goes through the composed path. dst may be a source: each vector
// (block) of it is stored after every source has read it.
template <typename L, bool kHalf, bool kClamp>
inline __attribute__((always_inline)) void sum_float_lanes(const float* const* srcs, int n, float scale, float limit,
                                                           float* dst, int64_t count, int64_t* clamped) {
  const int64_t whole = count / L::kWidth * L::kWidth;
  switch (n) {
    case 2:
      sum_fused<L, kHalf, kClamp, 2>(srcs, scale, limit, dst, whole, clamped);
      break;
    case 3:
      sum_fused<L, kHalf, kClamp, 3>(srcs, scale, limit, dst, whole, clamped);
      break;
    case 4:
      sum_fused<L, kHalf, kClamp, 4>(srcs, scale, limit, dst, whole, clamped);
      break;
    case 5:
      sum_fused<L, kHalf, kClamp, 5>(srcs, scale, limit, dst, whole, clamped);
      break;
    case 6:
      sum_fused<L, kHalf, kClamp, 6>(srcs, scale, limit, dst, whole, clamped);
      break;
    case 7:
      sum_fused<L, kHalf, kClamp, 7>(srcs, scale, limit, dst, whole, clamped);
      break;
    case 8:
      sum_fused<L, kHalf, kClamp, 8>(srcs, scale, limit, dst, whole, clamped);
      break;
    default:
      sum_blocks<L, kHalf, kClamp>(srcs, n, scale, limit, dst, whole, clamped);
      break;
  }
  if (whole < count) {
    std::vector<const void*> tails(n);
    for (int q = 0; q < n; ++q) tails[q] = srcs[q] + whole;
    sum_composed(tails.data(), n, c10::kFloat, kHalf ? c10::kHalf : c10::kBFloat16, scale, limit, dst + whole,
                 count - whole, clamped);
  }
}

template <bool kHalf, bool kClamp>
__attribute__((target("arch=x86-64-v3"))) void sum_float_v3(const float* const* srcs, int n, float scale, float limit,
                                                            float* dst, int64_t count, int64_t* clamped) {
  sum_float_lanes<Lanes8, kHalf, kClamp>(srcs, n, scale, limit, dst, count, clamped);
}

template <bool kHalf, bool kClamp>
__attribute__((target("arch=x86-64-v4"))) void sum_float_v4(const float* const* srcs, int n, float scale, float limit,
                                                            float* dst, int64_t count, int64_t* clamped) {
  sum_float_lanes<Lanes16, kHalf, kClamp>(srcs, n, scale, limit, dst, count, clamped);
}

using SumFloat = void (*)(const float* const*, int, float, float, float*, int64_t, int64_t*);

template <bool kHalf, bool kClamp>
SumFloat pick_sum_float() {
  if (kernels::isa_enabled(kernels::Isa::Avx512)) return &sum_float_v4<kHalf, kClamp>;
  if (kernels::isa_enabled(kernels::Isa::Avx2)) return &sum_float_v3<kHalf, kClamp>;
  return nullptr;
}

SumFloat pick_sum_float(bool half, bool clamp) {
  if (half) return clamp ? pick_sum_float<true, true>() : pick_sum_float<true, false>();
  return clamp ? pick_sum_float<false, true>() : pick_sum_float<false, false>();
}
#endif

}  // namespace

void low_precision_sum_cpu(const void* const* srcs, int n, c10::ScalarType dtype, c10::ScalarType wire, double scale,
                           double limit, void* dst, int64_t count, int64_t* clamped) {
  TORCH_CHECK(n >= 1, "fastcomm low_precision_sum: needs at least one source, got ", n);
  TORCH_CHECK(wire == c10::kHalf || wire == c10::kBFloat16,
              "fastcomm low_precision_sum: the wire dtype must be float16 or bfloat16, got ", wire);
  if (count <= 0) return;
#if FASTCOMM_HAS_FLOAT_LANES
  // In float, as scaled_copy_cpu computes float32 -> float16/bfloat16 (the
  // scale and the limit rounded to float first; an inf limit clamps nothing).
  if (dtype == c10::kFloat) {
    const auto f_limit = static_cast<float>(limit);
    if (SumFloat sum = pick_sum_float(wire == c10::kHalf, !std::isinf(f_limit))) {
      return sum(reinterpret_cast<const float* const*>(srcs), n, static_cast<float>(scale), f_limit,
                 static_cast<float*>(dst), count, clamped);
    }
  }
#endif
  sum_composed(srcs, n, dtype, wire, scale, limit, dst, count, clamped);
}

}  // namespace compress
}  // namespace fastcomm
