// PowerSGD's three products for one (rows x cols) float32 matrix M and a small
// rank r (the CPU path of fastcomm.hooks.powersgd):
//   project:     P = M Q            (rows x r)
//   back:        Q = M^T P          (cols x r)
//   approximate: error = M - P Q^T (optional), then M = P Q^T, in one pass
// Each reads M once, streaming; r is small, so these are memory-bound and a
// general GEMM (on some CPUs far below memory speed for small r, worst for
// M^T P; pytest benchmarks/kernels/test_compression.py -k powersgd_products
// compares) is the wrong tool. Compiled for baseline x86-64 and
// x86-64-v3 (AVX2 + FMA), picked at run time. Rows (project, approximate) or
// column ranges (back) are split over threads, each output element computed
// by one thread in a fixed order: the result does not depend on the thread count.
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/compress_cpu.h"
#include "kernels/cpu/isa.h"

namespace fastcomm {
namespace compress {

namespace {

#define FASTCOMM_ALWAYS_INLINE inline __attribute__((always_inline))

// 8 independent lanes: vectorizable without reassociating a float sum.
FASTCOMM_ALWAYS_INLINE float dot(const float* a, const float* b, int64_t n) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] += a[j + l] * b[j + l];
  }
  for (; j < n; ++j) lanes[0] += a[j] * b[j];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// qt: r x cols (Q transposed).
FASTCOMM_ALWAYS_INLINE void project_rows(const float* m, const float* qt, float* p, int64_t cols, int64_t r,
                                         int64_t row0, int64_t row1) {
  for (int64_t i = row0; i < row1; ++i) {
    for (int64_t k = 0; k < r; ++k) p[i * r + k] = dot(m + i * cols, qt + k * cols, cols);
  }
}

// qt[k][col0:col1] = sum over rows of M[i][col0:col1] * P[i][k], rows in order.
FASTCOMM_ALWAYS_INLINE void back_columns(const float* m, const float* p, float* qt, int64_t rows, int64_t cols,
                                         int64_t r, int64_t col0, int64_t col1) {
  for (int64_t k = 0; k < r; ++k) std::fill(qt + k * cols + col0, qt + k * cols + col1, 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = m + i * cols;
    for (int64_t k = 0; k < r; ++k) {
      const float w = p[i * r + k];
      float* out = qt + k * cols;
      for (int64_t j = col0; j < col1; ++j) out[j] += row[j] * w;
    }
  }
}

FASTCOMM_ALWAYS_INLINE void approximate_rows(const float* p, const float* qt, float* m, float* error, int64_t cols,
                                             int64_t r, int64_t row0, int64_t row1) {
  std::vector<float> v(cols);
  for (int64_t i = row0; i < row1; ++i) {
    std::fill(v.begin(), v.end(), 0.0f);
    for (int64_t k = 0; k < r; ++k) {
      const float w = p[i * r + k];
      const float* q = qt + k * cols;
      for (int64_t j = 0; j < cols; ++j) v[j] += w * q[j];
    }
    float* row = m + i * cols;
    if (error) {
      float* e = error + i * cols;
      for (int64_t j = 0; j < cols; ++j) e[j] = row[j] - v[j];
    }
    std::copy(v.begin(), v.end(), row);
  }
}

struct Kernels {
  void (*project)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t);
  void (*back)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t);
  void (*approximate)(const float*, const float*, float*, float*, int64_t, int64_t, int64_t, int64_t);
};

#define FASTCOMM_POWERSGD_KERNELS(SUFFIX, TARGET)                                                                     \
  TARGET void project_##SUFFIX(const float* m, const float* qt, float* p, int64_t c, int64_t r, int64_t a,            \
                               int64_t b) {                                                                           \
    project_rows(m, qt, p, c, r, a, b);                                                                               \
  }                                                                                                                   \
  TARGET void back_##SUFFIX(const float* m, const float* p, float* qt, int64_t rows, int64_t c, int64_t r, int64_t a, \
                            int64_t b) {                                                                              \
    back_columns(m, p, qt, rows, c, r, a, b);                                                                         \
  }                                                                                                                   \
  TARGET void approximate_##SUFFIX(const float* p, const float* qt, float* m, float* e, int64_t c, int64_t r,         \
                                   int64_t a, int64_t b) {                                                            \
    approximate_rows(p, qt, m, e, c, r, a, b);                                                                        \
  }                                                                                                                   \
  constexpr Kernels kernels_##SUFFIX{project_##SUFFIX, back_##SUFFIX, approximate_##SUFFIX};

FASTCOMM_POWERSGD_KERNELS(baseline, )
#if defined(__x86_64__) && defined(__GNUC__)
FASTCOMM_POWERSGD_KERNELS(v3, __attribute__((target("arch=x86-64-v3"))))
#endif

const Kernels& kernels() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (::fastcomm::kernels::isa_enabled(::fastcomm::kernels::Isa::Avx2)) return kernels_v3;
#endif
  return kernels_baseline;
}

std::vector<float> transposed(const float* q, int64_t cols, int64_t r) {
  std::vector<float> qt(r * cols);
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t k = 0; k < r; ++k) qt[k * cols + j] = q[j * r + k];
  }
  return qt;
}

// Rows per task: about kGrain elements of M.
int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, cols));
}

}  // namespace

void powersgd_project_cpu(const float* m, const float* q, float* p, int64_t rows, int64_t cols, int64_t r) {
  const std::vector<float> qt = transposed(q, cols, r);
  const Kernels& k = kernels();
  at::parallel_for(0, rows, row_grain(cols), [&](int64_t a, int64_t b) { k.project(m, qt.data(), p, cols, r, a, b); });
}

void powersgd_back_cpu(const float* m, const float* p, float* q, int64_t rows, int64_t cols, int64_t r) {
  std::vector<float> qt(r * cols);
  const Kernels& k = kernels();
  at::parallel_for(0, cols, 256, [&](int64_t a, int64_t b) { k.back(m, p, qt.data(), rows, cols, r, a, b); });
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t c = 0; c < r; ++c) q[j * r + c] = qt[c * cols + j];
  }
}

void powersgd_approximate_cpu(const float* p, const float* q, float* m, float* error, int64_t rows, int64_t cols,
                              int64_t r) {
  const std::vector<float> qt = transposed(q, cols, r);
  const Kernels& k = kernels();
  at::parallel_for(0, rows, row_grain(cols),
                   [&](int64_t a, int64_t b) { k.approximate(p, qt.data(), m, error, cols, r, a, b); });
}

}  // namespace compress
}  // namespace fastcomm
