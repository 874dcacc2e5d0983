// Device kernels the backend needs, looked up by device type.
//
// Core holds the table; the kernels fill it. Each device's kernels register
// themselves (csrc/kernels/cpu/ always, csrc/kernels/cuda/ when that folder is
// compiled), so no code above the kernels needs #ifdef and core includes no
// kernel. Registration happens during static initialisation of _C; lookups
// afterwards are read-only.
#pragma once

#include <cstddef>

#include <c10/core/Device.h>

#include "core/copy_segment.h"

namespace fastcomm {

// Copies `count` segments whose pointers are on `device`, ordered with the
// device's current stream (CUDA) or synchronously (CPU).
using CopySegmentsFn = void (*)(const CopySegment* segments, size_t count, c10::Device device);

void register_copy_segments(c10::DeviceType type, CopySegmentsFn fn);
// nullptr when no kernel is compiled for `type`.
CopySegmentsFn find_copy_segments(c10::DeviceType type);

// True when this build compiled csrc/kernels/cuda/.
bool cuda_kernels_compiled();

}  // namespace fastcomm
