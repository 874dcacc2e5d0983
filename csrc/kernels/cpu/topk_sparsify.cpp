// Top-k sparsification with error feedback, and the fused scatter-and-sum of
// all ranks' (values, indices). Format: kernels/compress_format.h.
//
// Selection is exact (not a sampled threshold): nth_element finds the k-th
// largest magnitude t in O(count); every element above t is taken, then
// elements equal to t in index order until k are taken. NaN counts as the
// largest magnitude, so a broken gradient is sent on.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/errors.h"
#include "kernels/cpu/compress_cpu.h"
#include "kernels/cpu/compress_elements.h"

namespace fastcomm {
namespace compress {

namespace {

float magnitude(float x) {
  return std::isnan(x) ? std::numeric_limits<float>::infinity() : std::abs(x);
}

}  // namespace

void topk_compress_cpu(const void* src, c10::ScalarType dtype, float* error, int64_t count, int64_t k,
                       int32_t* payload) {
  // x = src + error, in float32, kept in the error buffer (or a scratch one).
  std::vector<float> scratch;
  float* x = error;
  if (!x) {
    scratch.resize(count);
    x = scratch.data();
  }
  FASTCOMM_DISPATCH_GRAD_TYPES(dtype, "topk_compress", [&] {
    const scalar_t* s = static_cast<const scalar_t*>(src);
    const bool accumulate = error != nullptr;
    at::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) x[i] = static_cast<float>(s[i]) + (accumulate ? x[i] : 0.0f);
    });
  });
  std::vector<float> mags(count);
  for (int64_t i = 0; i < count; ++i) mags[i] = magnitude(x[i]);
  std::vector<float> order(mags);
  std::nth_element(order.begin(), order.begin() + (count - k), order.end());
  const float threshold = order[count - k];
  int64_t above = 0;
  for (int64_t i = 0; i < count; ++i) above += mags[i] > threshold;
  int64_t equal_left = k - above;
  float* values = reinterpret_cast<float*>(payload);
  int32_t* indices = payload + k;
  int64_t taken = 0;
  for (int64_t i = 0; i < count && taken < k; ++i) {
    const bool take = mags[i] > threshold || (mags[i] == threshold && equal_left-- > 0);
    if (!take) continue;
    std::memcpy(&values[taken], &x[i], sizeof(float));
    indices[taken++] = static_cast<int32_t>(i);
    x[i] = 0.0f;
  }
  if (error) {
    for (int64_t i = 0; i < count; ++i) error[i] = finite_or_zero(error[i]);
  }
}

void topk_sum_cpu(const int32_t* gathered, int64_t ranks, int64_t k, int64_t count, double scale, void* out,
                  c10::ScalarType dtype, const char* op) {
  std::vector<float> sum(count, 0.0f);
  for (int64_t r = 0; r < ranks; ++r) {
    const int32_t* words = gathered + r * 2 * k;
    const float* values = reinterpret_cast<const float*>(words);
    const int32_t* indices = words + k;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t i = indices[j];
      FC_CHECK(i >= 0 && i < count, op, "rank ", r, "'s payload has index ", i, " outside [0, ", count, ")");
      sum[i] += values[j];
    }
  }
  FASTCOMM_DISPATCH_GRAD_TYPES(dtype, "topk_sum", [&] {
    scalar_t* o = static_cast<scalar_t*>(out);
    const float s = static_cast<float>(scale);
    at::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = static_cast<scalar_t>(sum[i] * s);
    });
  });
}

}  // namespace compress
}  // namespace fastcomm
