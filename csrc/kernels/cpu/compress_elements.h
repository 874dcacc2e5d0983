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

}  // namespace compress
}  // namespace fastcomm

// Runs the lambda with scalar_t bound to the element type of a gradient dtype.
#define FASTCOMM_DISPATCH_GRAD_TYPES(dtype, op, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, op, __VA_ARGS__)
