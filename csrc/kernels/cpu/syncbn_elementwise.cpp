// SyncBatchNorm's elementwise passes: normalize (forward) and the input
// gradient (backward). Both read per-channel coefficients computed once by the
// caller and round to T once per element.
#include <algorithm>

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "kernels/cpu/syncbn_cpu.h"

namespace fastcomm {
namespace syncbn {

namespace {

// Elements per parallel task, below which threads are not worth waking.
constexpr int64_t kGrainElements = 1 << 15;

// Calls `segment(c, offset, length)` for every run of one channel's elements
// (NC*-contiguous layout) or `row(offset)` for every row holding each channel
// once (channels-last layout), in parallel.
template <typename SegmentFn, typename RowFn>
void for_each_run(const ChannelLayout& layout, SegmentFn segment, RowFn row) {
  if (layout.inner == 1) {
    const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, layout.channels));
    at::parallel_for(0, layout.rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) row(r * layout.channels);
    });
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kGrainElements / layout.inner);
  at::parallel_for(0, layout.rows * layout.channels, grain, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) segment(s % layout.channels, s * layout.inner, layout.inner);
  });
}

}  // namespace

template <typename T, typename Acc>
void normalize_cpu(const T* x, T* y, ChannelLayout layout, const Acc* mean, const Acc* scale, const Acc* shift) {
  for_each_run(
      layout,
      [&](int64_t c, int64_t offset, int64_t length) {
        const Acc m = mean[c], s = scale[c], t = shift[c];
        const T* __restrict__ in = x + offset;
        T* __restrict__ out = y + offset;
        for (int64_t i = 0; i < length; ++i) out[i] = static_cast<T>((static_cast<Acc>(in[i]) - m) * s + t);
      },
      [&](int64_t offset) {
        const T* __restrict__ in = x + offset;
        T* __restrict__ out = y + offset;
        for (int64_t c = 0; c < layout.channels; ++c) {
          out[c] = static_cast<T>((static_cast<Acc>(in[c]) - mean[c]) * scale[c] + shift[c]);
        }
      });
}

template <typename T, typename Acc>
void grad_input_cpu(const T* dy, const T* x, T* dx, ChannelLayout layout, const Acc* mean, const Acc* a, const Acc* b,
                    const Acc* c) {
  for_each_run(
      layout,
      [&](int64_t ch, int64_t offset, int64_t length) {
        const Acc m = mean[ch], ka = a[ch], kb = b[ch], kc = c[ch];
        const T* __restrict__ g = dy + offset;
        const T* __restrict__ in = x + offset;
        T* __restrict__ out = dx + offset;
        for (int64_t i = 0; i < length; ++i) {
          out[i] = static_cast<T>(ka * static_cast<Acc>(g[i]) + kb * (static_cast<Acc>(in[i]) - m) + kc);
        }
      },
      [&](int64_t offset) {
        const T* __restrict__ g = dy + offset;
        const T* __restrict__ in = x + offset;
        T* __restrict__ out = dx + offset;
        for (int64_t ch = 0; ch < layout.channels; ++ch) {
          out[ch] =
              static_cast<T>(a[ch] * static_cast<Acc>(g[ch]) + b[ch] * (static_cast<Acc>(in[ch]) - mean[ch]) + c[ch]);
        }
      });
}

#define FASTCOMM_INSTANTIATE_ELEMENTWISE(T, Acc)                                                                  \
  template void normalize_cpu<T, Acc>(const T*, T*, ChannelLayout, const Acc*, const Acc*, const Acc*);           \
  template void grad_input_cpu<T, Acc>(const T*, const T*, T*, ChannelLayout, const Acc*, const Acc*, const Acc*, \
                                       const Acc*);
FASTCOMM_INSTANTIATE_ELEMENTWISE(float, float)
FASTCOMM_INSTANTIATE_ELEMENTWISE(double, double)
FASTCOMM_INSTANTIATE_ELEMENTWISE(c10::Half, float)
FASTCOMM_INSTANTIATE_ELEMENTWISE(c10::BFloat16, float)
#undef FASTCOMM_INSTANTIATE_ELEMENTWISE

}  // namespace syncbn
}  // namespace fastcomm
