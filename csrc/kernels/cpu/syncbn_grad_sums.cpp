// The two per-channel sums of batch norm's backward: sum(dy) and
// sum(dy * (x - mean)). They become the weight and bias gradients, where a
// float32 sum over many elements loses digits to cancellation, so the lanes
// (along the inner elements of a channel, or across channels in the
// channels-last layout) accumulate in float64; x - mean is formed in Acc. Row
// blocks are combined in order (channel_reduction.h).
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "kernels/cpu/channel_reduction.h"
#include "kernels/cpu/syncbn_cpu.h"

namespace fastcomm {
namespace syncbn {

namespace {

constexpr int kLanes = 8;

struct SumPair {
  double dy = 0;
  double dy_xmu = 0;
};

// One channel's rows [row_begin, row_end) in the NC*-contiguous layout.
template <typename T, typename Acc>
SumPair grad_sums_channel_planes(const T* dy, const T* x, ChannelLayout layout, int64_t channel, Acc mean,
                                 int64_t row_begin, int64_t row_end) {
  double sum_dy[kLanes] = {};
  double sum_dy_xmu[kLanes] = {};
  const int64_t inner = layout.inner;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t offset = (r * layout.channels + channel) * inner;
    const T* dy_seg = dy + offset;
    const T* x_seg = x + offset;
    int64_t i = 0;
    for (; i + kLanes <= inner; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const double g = static_cast<double>(static_cast<Acc>(dy_seg[i + l]));
        sum_dy[l] += g;
        sum_dy_xmu[l] += g * static_cast<double>(static_cast<Acc>(x_seg[i + l]) - mean);
      }
    }
    for (; i < inner; ++i) {
      const double g = static_cast<double>(static_cast<Acc>(dy_seg[i]));
      sum_dy[0] += g;
      sum_dy_xmu[0] += g * static_cast<double>(static_cast<Acc>(x_seg[i]) - mean);
    }
  }
  SumPair result;
  for (int l = 0; l < kLanes; ++l) {
    result.dy += sum_dy[l];
    result.dy_xmu += sum_dy_xmu[l];
  }
  return result;
}

// Rows [row_begin, row_end) of the channels-last layout; out[c] receives channel c.
template <typename T, typename Acc>
void grad_sums_rows(const T* dy, const T* x, ChannelLayout layout, const Acc* mean, int64_t row_begin, int64_t row_end,
                    SumPair* out) {
  const int64_t channels = layout.channels;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* __restrict__ dy_row = dy + r * channels;
    const T* __restrict__ x_row = x + r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const double g = static_cast<double>(static_cast<Acc>(dy_row[c]));
      out[c].dy += g;
      out[c].dy_xmu += g * static_cast<double>(static_cast<Acc>(x_row[c]) - mean[c]);
    }
  }
}

}  // namespace

template <typename T, typename Acc>
void grad_sums_cpu(const T* dy, const T* x, ChannelLayout layout, const Acc* mean, double* sums) {
  const int64_t channels = layout.channels;
  const RowBlocks blocks = split_rows(layout);
  const std::vector<SumPair> partials = reduce_row_blocks<SumPair>(
      layout, blocks,
      [&](int64_t c, int64_t row_begin, int64_t row_end) {
        return grad_sums_channel_planes(dy, x, layout, c, mean[c], row_begin, row_end);
      },
      [&](int64_t row_begin, int64_t row_end, SumPair* out) {
        grad_sums_rows(dy, x, layout, mean, row_begin, row_end, out);
      });
  for (int64_t c = 0; c < channels; ++c) {
    SumPair total;
    for (int64_t b = 0; b < blocks.count; ++b) {
      total.dy += partials[b * channels + c].dy;
      total.dy_xmu += partials[b * channels + c].dy_xmu;
    }
    sums[c] = total.dy;
    sums[channels + c] = total.dy_xmu;
  }
}

template void grad_sums_cpu<float, float>(const float*, const float*, ChannelLayout, const float*, double*);
template void grad_sums_cpu<double, double>(const double*, const double*, ChannelLayout, const double*, double*);
template void grad_sums_cpu<c10::Half, float>(const c10::Half*, const c10::Half*, ChannelLayout, const float*, double*);
template void grad_sums_cpu<c10::BFloat16, float>(const c10::BFloat16*, const c10::BFloat16*, ChannelLayout,
                                                  const float*, double*);

}  // namespace syncbn
}  // namespace fastcomm
