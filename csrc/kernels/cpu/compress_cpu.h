// CPU kernels behind the fastcomm::compress_* operators (csrc/ops/compress_ops.cpp).
//
// Raw pointers and sizes; elements of `dtype` (float32, float64, bfloat16,
// float16) are computed in float32 (float64 for float64). Error-feedback
// buffers are float32 and hold the part of the gradient not yet sent; none of
// them is left holding inf or NaN (a non-finite value is sent on, so a
// GradScaler sees it, and dropped from the error). Payload layouts:
// kernels/compress_format.h. Every kernel is deterministic: the result does not
// depend on the number of threads.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

namespace fastcomm {
namespace compress {

// One piece of a multi-tensor copy: count elements from src to dst.
struct ScaledCopy {
  const void* src;
  c10::ScalarType src_dtype;
  void* dst;
  c10::ScalarType dst_dtype;
  int64_t count;
};

// dst = src * scale for every piece, in one pass, converting dtypes. Finite
// values whose |src * scale| exceeds `limit` become +-limit (inf and NaN pass
// unchanged; limit = inf clamps nothing). Returns how many were clamped.
int64_t scaled_copy_cpu(const std::vector<ScaledCopy>& pieces, double scale, double limit);
// The same for one piece on the calling thread (no task split: for callers
// that convert small pieces in a loop of their own).
int64_t scaled_copy_serial(const ScaledCopy& piece, double scale, double limit);

// The fp16/bf16 hooks' low-precision sum of n sources of `dtype` in one pass:
//   dst[i] = widen(round(sum over q in order of widen(round(clamp(srcs[q][i] * scale)))))
// with round() to `wire` (float16 or bfloat16, nearest even), the clamp to
// +-limit as scaled_copy_cpu's, the sum in float32; clamped[q] gains how many
// of srcs[q]'s values were clamped. Bit for bit what scaled_copy_cpu into the
// wire dtype, kernels::reduce and scaled_copy_cpu back (scale 1) give
// (low_precision_sum.cpp). dst may be one of the sources (not a shifted view).
void low_precision_sum_cpu(const void* const* srcs, int n, c10::ScalarType dtype, c10::ScalarType wire, double scale,
                           double limit, void* dst, int64_t count, int64_t* clamped);

// payload = int8 blocks of (src + error); error = (src + error) - dequantized.
// error may be null (no error feedback). Stochastic rounding draws
// uniform_from_hash(seed, element index); otherwise round to nearest even.
void int8_quantize_cpu(const void* src, c10::ScalarType dtype, float* error, int64_t count, int64_t block,
                       bool stochastic, uint64_t seed, uint8_t* payload);

// out = scale * sum over ranks (in rank order) of the dequantized payloads.
// gathered: ranks payloads of int8_payload_bytes(count, block) bytes each.
void int8_dequantize_sum_cpu(const uint8_t* gathered, int64_t ranks, int64_t count, int64_t block, double scale,
                             void* out, c10::ScalarType dtype);

// payload = the k elements of x = src + error with the largest |x| (NaN counts
// as largest; ties go to the lower index), ascending by index; error = x with
// those k zeroed. Without error (null) x = src.
void topk_compress_cpu(const void* src, c10::ScalarType dtype, float* error, int64_t count, int64_t k,
                       int32_t* payload);

// out = scale * sum over ranks (in rank order) of their k values scattered to
// their indices; other elements 0. Throws when an index is outside [0, count).
void topk_sum_cpu(const int32_t* gathered, int64_t ranks, int64_t k, int64_t count, double scale, void* out,
                  c10::ScalarType dtype, const char* op);

// payload = scale (mean |x| over the bucket, x = src + error) and the sign bits
// of x; error = x - scale * sign(x). error may be null.
void sign_compress_cpu(const void* src, c10::ScalarType dtype, float* error, int64_t count, uint8_t* payload);

// out = scale * sum over ranks (in rank order) of scale_r * sign_r.
void sign_sum_cpu(const uint8_t* gathered, int64_t ranks, int64_t count, double scale, void* out,
                  c10::ScalarType dtype);

// PowerSGD's products for a float32 matrix M (rows x cols, row-major) and rank
// r, Q (cols x r) and P (rows x r) row-major (powersgd_matmul.cpp):
//   project: p = m q;  back: q = m^T p;  approximate: error = m - p q^T (when
//   error is not null), then m = p q^T.
void powersgd_project_cpu(const float* m, const float* q, float* p, int64_t rows, int64_t cols, int64_t r);
void powersgd_back_cpu(const float* m, const float* p, float* q, int64_t rows, int64_t cols, int64_t r);
void powersgd_approximate_cpu(const float* p, const float* q, float* m, float* error, int64_t rows, int64_t cols,
                              int64_t r);

}  // namespace compress
}  // namespace fastcomm
