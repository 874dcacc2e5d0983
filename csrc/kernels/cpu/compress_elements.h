// Element helpers shared by the CPU compression kernels: dtype dispatch and
// the accumulator type (float32 for float32 and the half types, float64 for
// float64), and the grain of their parallel loops.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/isa.h"

namespace fastcomm {
namespace compress {

// Elements per task of at::parallel_for: large enough that a task outweighs
// its scheduling, small enough to split one bucket over the threads.
constexpr int64_t kGrain = 1 << 15;

template <typename T>
using Acc = at::opmath_type<T>;

// A non-finite value leaves the error-feedback buffer as 0 (see compress_cpu.h).
inline float finite_or_zero(float v) {
  return std::isfinite(v) ? v : 0.0f;
}

// Whether to run the "avx2" variants below (compiled for AVX2 without FMA, so
// no multiply-add is contracted and results stay bitwise the baseline's);
// kernels/cpu/isa.h decides, and tests cap it to run the baseline.
inline bool use_avx2_variants() {
  return kernels::isa_enabled(kernels::Isa::Avx2);
}

}  // namespace compress
}  // namespace fastcomm

// Defines NAME##_baseline and NAME##_avx2 (x86-64 GCC only) from the same
// always-inline template body BODY<T>, and NAME<T>(args...) picking one at run
// time. The build itself targets baseline x86-64 (SSE2).
#if defined(__x86_64__) && defined(__GNUC__)
#define FASTCOMM_AVX2_VARIANTS(NAME, BODY)                         \
  template <typename T, typename... Args>                          \
  void NAME##_baseline(Args... args) {                             \
    BODY<T>(args...);                                              \
  }                                                                \
  template <typename T, typename... Args>                          \
  __attribute__((target("avx2"))) void NAME##_avx2(Args... args) { \
    BODY<T>(args...);                                              \
  }                                                                \
  template <typename T, typename... Args>                          \
  void NAME(Args... args) {                                        \
    if (::fastcomm::compress::use_avx2_variants()) {               \
      NAME##_avx2<T>(args...);                                     \
    } else {                                                       \
      NAME##_baseline<T>(args...);                                 \
    }                                                              \
  }
#else
#define FASTCOMM_AVX2_VARIANTS(NAME, BODY) \
  template <typename T, typename... Args>  \
  void NAME(Args... args) {                \
    BODY<T>(args...);                      \
  }
#endif

// Runs the lambda with scalar_t bound to the element type of a gradient dtype.
#define FASTCOMM_DISPATCH_GRAD_TYPES(dtype, op, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, op, __VA_ARGS__)
