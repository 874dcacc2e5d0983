// Packing many tensors into one flat buffer and back, with the multi-tensor
// copy kernel of the tensors' device. All tensors must be contiguous, on one
// device and of one dtype (callers group by dtype first).
//
// Two layouts:
//   concatenated: flat = [t_0 | t_1 | ... ]                       (pack, unpack)
//   rank-major:   flat = [rank 0: t_0[0] | t_1[0] | ...][rank 1: ...] where
//                 t_i[r] is the r-th of world_size equal chunks of t_i
//                 (the layout a flat all_gather produces and a flat
//                 reduce_scatter consumes).
#pragma once

#include <map>
#include <vector>

#include <ATen/ATen.h>

#include "kernels/copy_segment.h"

namespace fastcomm {

// True when a multi-tensor copy kernel exists for this device.
bool can_pack(c10::DeviceType device);

at::Tensor pack(const std::vector<at::Tensor>& tensors);
void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& tensors);

// Pure layout logic: segments copying chunk r of each tensor to/from the
// rank-major flat buffer. `to_flat` selects the direction.
std::vector<CopySegment> rank_major_segments(
    const at::Tensor& flat,
    const std::vector<at::Tensor>& tensors,
    int64_t world_size,
    bool to_flat);
void copy_segments(c10::Device device, const std::vector<CopySegment>& segments);

// Indices of `tensors` grouped by dtype, in order of first appearance.
std::vector<std::vector<size_t>> group_by_dtype(const std::vector<at::Tensor>& tensors);

}  // namespace fastcomm
