// float16 and bfloat16 conversions shared by the CPU kernels (reductions and
// the multi-tensor scaled copy), written once so every kernel rounds alike.
//
// bfloat16 is handled as its 16 bits: widening is exact; narrowing rounds to
// nearest even and turns every NaN into 0x7FC0, the same bits as
// c10::BFloat16(float). float16 blocks are converted with F16C (part of
// x86-64-v3), 8 elements at a time, because GCC 12 does not vectorize
// _Float16 conversions; callers use them only when kernels/cpu/isa.h enables
// Isa::Avx2. The F16C conversion rounds to nearest even, as a _Float16 cast does.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FASTCOMM_HAS_F16C_BLOCKS 1
#else
#define FASTCOMM_HAS_F16C_BLOCKS 0
#endif

namespace fastcomm::kernels {

inline __attribute__((always_inline)) float bfloat16_bits_to_float(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline __attribute__((always_inline)) uint16_t float_to_bfloat16_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return f != f ? static_cast<uint16_t>(0x7FC0) : static_cast<uint16_t>(rounded);
}

#if FASTCOMM_HAS_F16C_BLOCKS
__attribute__((target("arch=x86-64-v3"))) inline void half_block_to_float_f16c(const _Float16* src, float* dst,
                                                                               int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

__attribute__((target("arch=x86-64-v3"))) inline void float_block_to_half_f16c(const float* src, _Float16* dst,
                                                                               int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) dst[i] = static_cast<_Float16>(src[i]);
}
#endif

}  // namespace fastcomm::kernels
