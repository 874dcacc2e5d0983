// Welford's one-pass mean and M2 per channel, vectorized across lanes.
//
// kLanes running (mean, M2) pairs share one step count, so the division of a
// Welford step is one reciprocal per kLanes elements and the lane loop
// vectorizes. Every kFoldSteps steps the lanes are folded into a float64
// accumulator with Chan's formula, which bounds the rounding error of the Acc
// lanes. In the NC*-contiguous layout lanes run along the inner (spatial)
// elements of one channel; in the channels-last layout (inner == 1) a row holds
// every channel once, so each channel is its own lane and a row is one step.
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "kernels/cpu/channel_reduction.h"
#include "kernels/cpu/syncbn_cpu.h"

namespace fastcomm {
namespace syncbn {

namespace {

constexpr int kLanes = 16;
constexpr int64_t kFoldSteps = 256;

// (n, mean, M2) in float64; add() is Chan's combination with another set.
struct Chan {
  double n = 0;
  double mean = 0;
  double m2 = 0;

  void add(double nb, double mean_b, double m2_b) {
    if (nb == 0) return;
    const double total = n + nb;
    const double delta = mean_b - mean;
    mean += delta * (nb / total);
    m2 += m2_b + delta * delta * (n * nb / total);
    n = total;
  }
  void add(const Chan& other) {
    add(other.n, other.mean, other.m2);
  }
};

// One channel's rows [row_begin, row_end) in the NC*-contiguous layout.
template <typename T>
Chan welford_channel_planes(const T* x, ChannelLayout layout, int64_t channel, int64_t row_begin, int64_t row_end) {
  using Acc = acc_type<T>;
  Chan result;
  Acc mean[kLanes] = {};
  Acc m2[kLanes] = {};
  int64_t steps = 0;
  auto fold = [&] {
    for (int l = 0; l < kLanes; ++l) {
      result.add(static_cast<double>(steps), mean[l], m2[l]);
      mean[l] = 0;
      m2[l] = 0;
    }
    steps = 0;
  };
  const int64_t inner = layout.inner;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* segment = x + (r * layout.channels + channel) * inner;
    int64_t i = 0;
    for (; i + kLanes <= inner; i += kLanes) {
      ++steps;
      const Acc inv = Acc(1) / static_cast<Acc>(steps);
      for (int l = 0; l < kLanes; ++l) {
        const Acc v = static_cast<Acc>(segment[i + l]);
        const Acc delta = v - mean[l];
        mean[l] += delta * inv;
        m2[l] += delta * (v - mean[l]);
      }
      if (steps == kFoldSteps) fold();
    }
    for (; i < inner; ++i) result.add(1.0, static_cast<double>(segment[i]), 0.0);
  }
  if (steps > 0) fold();
  return result;
}

// Rows [row_begin, row_end) of the channels-last layout; out[c] receives channel c.
template <typename T>
void welford_rows(const T* x, ChannelLayout layout, int64_t row_begin, int64_t row_end, Chan* out) {
  using Acc = acc_type<T>;
  const int64_t channels = layout.channels;
  std::vector<Acc> mean(channels, Acc(0));
  std::vector<Acc> m2(channels, Acc(0));
  Acc* __restrict__ mean_p = mean.data();
  Acc* __restrict__ m2_p = m2.data();
  int64_t steps = 0;
  auto fold = [&] {
    for (int64_t c = 0; c < channels; ++c) {
      out[c].add(static_cast<double>(steps), mean_p[c], m2_p[c]);
      mean_p[c] = 0;
      m2_p[c] = 0;
    }
    steps = 0;
  };
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* __restrict__ row = x + r * channels;
    ++steps;
    const Acc inv = Acc(1) / static_cast<Acc>(steps);
    for (int64_t c = 0; c < channels; ++c) {
      const Acc v = static_cast<Acc>(row[c]);
      const Acc delta = v - mean_p[c];
      mean_p[c] += delta * inv;
      m2_p[c] += delta * (v - mean_p[c]);
    }
    if (steps == kFoldSteps) fold();
  }
  if (steps > 0) fold();
}

}  // namespace

template <typename T>
void welford_stats_cpu(const T* x, ChannelLayout layout, double* packed) {
  const int64_t channels = layout.channels;
  const RowBlocks blocks = split_rows(layout);
  const std::vector<Chan> partials = reduce_row_blocks<Chan>(
      layout, blocks,
      [&](int64_t c, int64_t row_begin, int64_t row_end) {
        return welford_channel_planes(x, layout, c, row_begin, row_end);
      },
      [&](int64_t row_begin, int64_t row_end, Chan* out) { welford_rows(x, layout, row_begin, row_end, out); });
  packed[0] = static_cast<double>(layout.per_channel());
  for (int64_t c = 0; c < channels; ++c) {
    Chan total;
    for (int64_t b = 0; b < blocks.count; ++b) total.add(partials[b * channels + c]);
    packed[1 + c] = total.n * total.mean;
    packed[1 + channels + c] = total.m2 + total.n * total.mean * total.mean;
  }
}

template void welford_stats_cpu<float>(const float*, ChannelLayout, double*);
template void welford_stats_cpu<double>(const double*, ChannelLayout, double*);
template void welford_stats_cpu<c10::Half>(const c10::Half*, ChannelLayout, double*);
template void welford_stats_cpu<c10::BFloat16>(const c10::BFloat16*, ChannelLayout, double*);

}  // namespace syncbn
}  // namespace fastcomm
