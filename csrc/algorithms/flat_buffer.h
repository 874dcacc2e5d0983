// Packing many tensors into one flat buffer and back, with the multi-tensor
// copy kernel of the tensors' device. All tensors must be contiguous, on one
// device and of one dtype (callers group by dtype first). Layout: the tensors
// back to back, in order: flat = [t_0 | t_1 | ...].
#pragma once

#include <vector>

#include <ATen/ATen.h>

namespace fastcomm {

// True when a multi-tensor copy kernel exists for this device.
bool can_pack(c10::DeviceType device);

// A new flat tensor holding `tensors` back to back.
at::Tensor pack(const std::vector<at::Tensor>& tensors);
// Copies `tensors` back to back into the 1-D tensor `flat` (sizes must add up).
void pack_into(const at::Tensor& flat, const std::vector<at::Tensor>& tensors);
// Inverse of pack_into.
void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& tensors);

// The world_size equal pieces of `t` (flattened) as views: piece r is what
// rank r sends or receives in a flat all_gather / reduce_scatter.
std::vector<at::Tensor> rank_chunks(const at::Tensor& t, int64_t world_size);

// Indices of `tensors` grouped by dtype, in order of first appearance.
std::vector<std::vector<size_t>> group_by_dtype(const std::vector<at::Tensor>& tensors);

}  // namespace fastcomm
