// float32 vectors for the CPU kernels that scale, clamp and round float32
// through a 16-bit wire dtype: the multi-tensor scaled copy's float32 ->
// float16 loop (multi_tensor_scale.cpp) and the fused low-precision sum
// (low_precision_sum.cpp), written once so both round and clamp alike.
//
// Each struct is one vector width with the same members: load/store/splat,
// mul/add, over_limit (finite lanes whose magnitude exceeds the bound; inf and
// NaN are not over), clamp (those lanes to +-bound, sign kept), count (lanes
// over), and through_half / through_bfloat16 (rounded to the wire dtype and
// widened again: nearest even, as an F16C conversion and
// half_conversions.h's float_to_bfloat16_bits; bfloat16 NaN -> 0x7FC0). Every
// member carries its target: call them only from functions compiled for that
// target (picked at run time through kernels/cpu/isa.h), where they inline.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FASTCOMM_HAS_FLOAT_LANES 1
#else
#define FASTCOMM_HAS_FLOAT_LANES 0
#endif

namespace fastcomm::kernels {

#if FASTCOMM_HAS_FLOAT_LANES
// x86-64-v3: 8 lanes (AVX2 + F16C).
struct Lanes8 {
  using Vec = __m256;
  using Mask = __m256;
  static constexpr int kWidth = 8;
  __attribute__((target("arch=x86-64-v3"))) static Vec load(const float* p) {
    return _mm256_loadu_ps(p);
  }
  __attribute__((target("arch=x86-64-v3"))) static void store(float* p, Vec v) {
    _mm256_storeu_ps(p, v);
  }
  __attribute__((target("arch=x86-64-v3"))) static Vec splat(float v) {
    return _mm256_set1_ps(v);
  }
  __attribute__((target("arch=x86-64-v3"))) static Vec mul(Vec a, Vec b) {
    return _mm256_mul_ps(a, b);
  }
  __attribute__((target("arch=x86-64-v3"))) static Vec add(Vec a, Vec b) {
    return _mm256_add_ps(a, b);
  }
  __attribute__((target("arch=x86-64-v3"))) static Mask over_limit(Vec v, Vec bound, Vec biggest) {
    const Vec mag = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    return _mm256_and_ps(_mm256_cmp_ps(mag, bound, _CMP_GT_OQ), _mm256_cmp_ps(mag, biggest, _CMP_LE_OQ));
  }
  __attribute__((target("arch=x86-64-v3"))) static Vec clamp(Vec v, Vec bound, Mask over) {
    const Vec limited = _mm256_or_ps(bound, _mm256_and_ps(_mm256_set1_ps(-0.0f), v));
    return _mm256_blendv_ps(v, limited, over);
  }
  __attribute__((target("arch=x86-64-v3"))) static int count(Mask over) {
    return __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(over)));
  }
  __attribute__((target("arch=x86-64-v3"))) static Vec through_half(Vec v) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  __attribute__((target("arch=x86-64-v3"))) static Vec through_bfloat16(Vec v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)),
                                             _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
    const Vec nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000));
    return _mm256_blendv_ps(_mm256_castsi256_ps(rounded), nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
};

// x86-64-v4: 16 lanes (AVX-512F), the comparisons in mask registers.
struct Lanes16 {
  using Vec = __m512;
  using Mask = __mmask16;
  static constexpr int kWidth = 16;
  __attribute__((target("arch=x86-64-v4"))) static Vec load(const float* p) {
    return _mm512_loadu_ps(p);
  }
  __attribute__((target("arch=x86-64-v4"))) static void store(float* p, Vec v) {
    _mm512_storeu_ps(p, v);
  }
  __attribute__((target("arch=x86-64-v4"))) static Vec splat(float v) {
    return _mm512_set1_ps(v);
  }
  __attribute__((target("arch=x86-64-v4"))) static Vec mul(Vec a, Vec b) {
    return _mm512_mul_ps(a, b);
  }
  __attribute__((target("arch=x86-64-v4"))) static Vec add(Vec a, Vec b) {
    return _mm512_add_ps(a, b);
  }
  __attribute__((target("arch=x86-64-v4"))) static Mask over_limit(Vec v, Vec bound, Vec biggest) {
    const Vec mag = _mm512_abs_ps(v);
    return _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(mag, bound, _CMP_GT_OQ), mag, biggest, _CMP_LE_OQ);
  }
  __attribute__((target("arch=x86-64-v4"))) static Vec clamp(Vec v, Vec bound, Mask over) {
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
    return _mm512_mask_mov_ps(v, over, _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(bound), sign)));
  }
  __attribute__((target("arch=x86-64-v4"))) static int count(Mask over) {
    return __builtin_popcount(static_cast<unsigned>(over));
  }
  __attribute__((target("arch=x86-64-v4"))) static Vec through_half(Vec v) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  __attribute__((target("arch=x86-64-v4"))) static Vec through_bfloat16(Vec v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)),
                                             _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
    const Vec nan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000));
    return _mm512_mask_mov_ps(_mm512_castsi512_ps(rounded), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan);
  }
};
#endif

}  // namespace fastcomm::kernels
