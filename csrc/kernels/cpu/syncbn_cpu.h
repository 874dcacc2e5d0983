// SyncBatchNorm's CPU kernels: pure functions over raw pointers and a
// ChannelLayout (kernels/syncbn_math.h). T is the element type (float, double,
// c10::Half, c10::BFloat16); Acc is acc_type<T> (syncbn_math.h). Reductions
// run over a fixed partition of the rows (channel_reduction.h), so results do
// not depend on the number of threads. All parallelism is at::parallel_for.
#pragma once

#include "kernels/syncbn_math.h"

namespace fastcomm {
namespace syncbn {

// One pass of Welford over every channel: writes the packed forward
// statistics (1 + 2C float64 values, layout in syncbn_math.h).
template <typename T>
void welford_stats_cpu(const T* x, ChannelLayout layout, double* packed);

// y = (x - mean_c) * scale_c + shift_c, rounded once to T.
template <typename T, typename Acc>
void normalize_cpu(const T* x, T* y, ChannelLayout layout, const Acc* mean, const Acc* scale, const Acc* shift);

// sums[c] = sum(dy), sums[C + c] = sum(dy * (x - mean_c)), in float64.
template <typename T, typename Acc>
void grad_sums_cpu(const T* dy, const T* x, ChannelLayout layout, const Acc* mean, double* sums);

// dx = a_c * dy + b_c * (x - mean_c) + c_c, rounded once to T.
template <typename T, typename Acc>
void grad_input_cpu(const T* dy, const T* x, T* dx, ChannelLayout layout, const Acc* mean, const Acc* a, const Acc* b,
                    const Acc* c);

}  // namespace syncbn
}  // namespace fastcomm
