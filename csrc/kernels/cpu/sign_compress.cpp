// Scaled sign compression (EF-SignSGD): one bit per element plus one float32
// scale, mean |x|, with error feedback; and the fused decode-and-sum of all
// ranks' payloads. Format: kernels/compress_format.h.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/compress_format.h"
#include "kernels/cpu/compress_cpu.h"
#include "kernels/cpu/compress_elements.h"

namespace fastcomm {
namespace compress {

void sign_compress_cpu(const void* src, c10::ScalarType dtype, float* error, int64_t count, uint8_t* payload) {
  uint8_t* bits = payload + 4;
  FASTCOMM_DISPATCH_GRAD_TYPES(dtype, "sign_compress", [&] {
    const scalar_t* s = static_cast<const scalar_t*>(src);
    auto value = [&](int64_t i) { return static_cast<float>(s[i]) + (error ? error[i] : 0.0f); };
    // Pass 1: sum |x| in float64 over fixed chunks (the same partial sums
    // whatever the thread count), then the chunks in order.
    const int64_t chunks = (count + kGrain - 1) / kGrain;
    std::vector<double> partial(chunks, 0.0);
    at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        // 8 float64 lanes, so the loop vectorizes without reassociating a sum
        double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const int64_t end = std::min(count, (c + 1) * kGrain);
        int64_t i = c * kGrain;
        for (; i + 8 <= end; i += 8) {
          for (int l = 0; l < 8; ++l) lanes[l] += std::abs(static_cast<double>(value(i + l)));
        }
        for (; i < end; ++i) lanes[0] += std::abs(static_cast<double>(value(i)));
        double sum = 0.0;
        for (double l : lanes) sum += l;
        partial[c] = sum;
      }
    });
    double total = 0.0;
    for (double p : partial) total += p;
    const float scale = count > 0 ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
    std::memcpy(payload, &scale, sizeof(scale));
    const bool finite = std::isfinite(scale);
    // Pass 2: 8 elements per byte; kGrain is a multiple of 8, so tasks own whole bytes.
    at::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t byte = begin / 8; byte * 8 < end; ++byte) {
        uint8_t packed = 0;
        for (int64_t bit = 0; bit < 8 && byte * 8 + bit < count; ++bit) {
          const int64_t i = byte * 8 + bit;
          const float x = value(i);
          const int positive = x >= 0.0f;  // arithmetic, not branches: the signs are random
          packed |= static_cast<uint8_t>(positive << bit);
          if (error) error[i] = finite ? x - scale * static_cast<float>(2 * positive - 1) : 0.0f;
        }
        bits[byte] = packed;
      }
    });
  });
}

void sign_sum_cpu(const uint8_t* gathered, int64_t ranks, int64_t count, double scale, void* out,
                  c10::ScalarType dtype) {
  const int64_t bytes = sign_payload_bytes(count);
  std::vector<float> scales(ranks);
  for (int64_t r = 0; r < ranks; ++r) std::memcpy(&scales[r], gathered + r * bytes, sizeof(float));
  FASTCOMM_DISPATCH_GRAD_TYPES(dtype, "sign_sum", [&] {
    scalar_t* o = static_cast<scalar_t*>(out);
    const float s = static_cast<float>(scale);
    const int64_t count_bytes = (count + 7) / 8;
    at::parallel_for(0, count_bytes, kGrain / 8, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        float sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t r = 0; r < ranks; ++r) {  // rank order, as on every rank
          const uint8_t byte = gathered[r * bytes + 4 + b];
          const float scale_r = scales[r];
          for (int bit = 0; bit < 8; ++bit) sum[bit] += scale_r * static_cast<float>(2 * ((byte >> bit) & 1) - 1);
        }
        const int64_t n = std::min<int64_t>(8, count - b * 8);
        for (int bit = 0; bit < n; ++bit) o[b * 8 + bit] = static_cast<scalar_t>(sum[bit] * s);
      }
    });
  });
}

}  // namespace compress
}  // namespace fastcomm
