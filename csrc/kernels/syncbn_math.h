// SyncBatchNorm's layout and per-channel formulas, shared by the CPU and CUDA
// kernels (torch-free, usable in device code).
//
// Forward statistics travel as one packed float64 buffer of 1 + 2C values:
//   [0]          n, the number of elements per channel on this rank
//   [1 + c]      S1_c = n * mean_c                 (the sum of x)
//   [1 + C + c]  S2_c = M2_c + n * mean_c^2        (the sum of x^2)
// where (n, mean_c, M2_c) come from a one-pass Welford reduction of the local
// data. Summing these buffers over ranks (one allreduce) and finalizing with
//   mean = S1 / N,   M2 = S2 - S1 * mean = sum_r M2_r + sum_r n_r (mean_r - mean)^2
// is Chan's parallel combination of the ranks' (n, mean, M2), exact for uneven
// counts and for ranks with n = 0. The float64 sums keep the cancellation in
// S2 - S1*mean below float32 precision while |mean| / std < 1e4.
//
// Backward sums travel as float64 [2C]: sum(dy) per channel, then
// sum(dy * (x - mean)) per channel.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/host_device.h"

namespace fastcomm {
namespace syncbn {

// The accumulation type of element type T: float for float, half and
// bfloat16, double for double.
template <typename T>
using acc_type = std::conditional_t<std::is_same_v<T, double>, double, float>;

// A tensor of shape (N, C, *spatial) seen as [rows][channels][inner]: element
// (r, c, i) lives at offset (r * channels + c) * inner + i.
//   NC*-contiguous:                  rows = N,            inner = prod(spatial)
//   channels-last (C innermost), 2-D: rows = N * prod(spatial), inner = 1
struct ChannelLayout {
  int64_t rows;
  int64_t channels;
  int64_t inner;

  FASTCOMM_HOST_DEVICE int64_t per_channel() const {
    return rows * inner;
  }
  FASTCOMM_HOST_DEVICE int64_t numel() const {
    return rows * channels * inner;
  }
  FASTCOMM_HOST_DEVICE int64_t packed_stats_size() const {
    return 1 + 2 * channels;
  }
};

struct ChannelStats {
  double mean;
  double biased_var;    // M2 / N: what normalization uses
  double unbiased_var;  // M2 / (N - 1): what running_var tracks
};

// Global statistics of one channel from the summed packed buffer (n > 1).
FASTCOMM_HOST_DEVICE inline ChannelStats finalize_channel(double n, double s1, double s2) {
  const double mean = s1 / n;
  double m2 = s2 - s1 * mean;
  if (m2 < 0) m2 = 0;  // rounding of a (near) constant channel
  return {mean, m2 / n, m2 / (n - 1)};
}

// Input gradient of batch norm with global batch statistics, per channel:
//   dx = a * dy + b * (x - mean) + c
// with a = w * invstd, b = -a * invstd^2 * sum(dy (x - mean)) / N, c = -a * sum(dy) / N.
struct GradInputCoefficients {
  double a;
  double b;
  double c;
};

FASTCOMM_HOST_DEVICE inline GradInputCoefficients grad_input_coefficients(double n, double sum_dy, double sum_dy_xmu,
                                                                          double invstd, double weight) {
  const double a = weight * invstd;
  return {a, -a * invstd * invstd * (sum_dy_xmu / n), -a * (sum_dy / n)};
}

}  // namespace syncbn
}  // namespace fastcomm
