// CUDA multi-tensor copy: many byte ranges in one launch (torch-free).
//
// Launch contract: grid.y = number of segments in the batch (<= kMaxSegments),
// grid.x blocks stride over the bytes of each segment. Uses 16-byte loads and
// stores when a segment's pointers and length are 16-byte aligned, bytes
// otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/copy_segment.h"

namespace fastcomm {
namespace cuda {

constexpr int kMaxSegments = 64;  // keeps the kernel argument under 2 KiB

struct SegmentBatch {
  CopySegment segments[kMaxSegments];
  int count;
};

__global__ void copy_segments_kernel(SegmentBatch batch) {
  const CopySegment seg = batch.segments[blockIdx.y];
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool aligned =
      ((reinterpret_cast<uintptr_t>(seg.src) | reinterpret_cast<uintptr_t>(seg.dst) | seg.bytes) & 15u) == 0;
  if (aligned) {
    const uint4* src = static_cast<const uint4*>(seg.src);
    uint4* dst = static_cast<uint4*>(seg.dst);
    for (size_t i = first; i < seg.bytes / 16; i += stride) dst[i] = src[i];
  } else {
    const uint8_t* src = static_cast<const uint8_t*>(seg.src);
    uint8_t* dst = static_cast<uint8_t*>(seg.dst);
    for (size_t i = first; i < seg.bytes; i += stride) dst[i] = src[i];
  }
}

}  // namespace cuda
}  // namespace fastcomm
