// CUDA multi-tensor copy: many byte ranges in one launch (torch-free).
//
// Launch contract: grid.y = number of segments in the batch (<= kMaxSegments),
// grid.x blocks stride over the bytes of each segment (any grid.x: the widest
// word is 16 bytes, so grid.x * blockDim.x >= bytes / 16 gives each thread one
// word). Each segment is copied in the widest words (16, 8, 4, 2 bytes) its
// source and destination share an alignment for: the bytes before the first
// aligned destination word and after the last one one by one, the rest in
// words. A segment that follows an odd-sized one in a flat buffer (a float32
// tensor of 5 elements, then a large one) so still copies in 4-byte words or
// wider; only pointers that differ by an odd number of bytes copy bytes.
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

// Bytes [first, bytes) of src to dst, stride apart, in words of W where dst
// is W-aligned (the caller checked that src and dst differ by a multiple of W).
template <typename W>
__device__ void copy_in_words(const uint8_t* src, uint8_t* dst, size_t bytes, size_t first, size_t stride) {
  constexpr size_t kWord = sizeof(W);
  size_t head = (kWord - reinterpret_cast<uintptr_t>(dst) % kWord) % kWord;
  if (head > bytes) head = bytes;
  const size_t words = (bytes - head) / kWord;
  const size_t tail = head + words * kWord;
  for (size_t i = first; i < head; i += stride) dst[i] = src[i];
  const W* src_words = reinterpret_cast<const W*>(src + head);
  W* dst_words = reinterpret_cast<W*>(dst + head);
  for (size_t i = first; i < words; i += stride) dst_words[i] = src_words[i];
  for (size_t i = tail + first; i < bytes; i += stride) dst[i] = src[i];
}

__global__ void copy_segments_kernel(SegmentBatch batch) {
  const CopySegment seg = batch.segments[blockIdx.y];
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint8_t* src = static_cast<const uint8_t*>(seg.src);
  uint8_t* dst = static_cast<uint8_t*>(seg.dst);
  const uintptr_t apart = reinterpret_cast<uintptr_t>(src) ^ reinterpret_cast<uintptr_t>(dst);
  if ((apart & 15u) == 0) {
    copy_in_words<uint4>(src, dst, seg.bytes, first, stride);
  } else if ((apart & 7u) == 0) {
    copy_in_words<uint2>(src, dst, seg.bytes, first, stride);
  } else if ((apart & 3u) == 0) {
    copy_in_words<uint32_t>(src, dst, seg.bytes, first, stride);
  } else if ((apart & 1u) == 0) {
    copy_in_words<uint16_t>(src, dst, seg.bytes, first, stride);
  } else {
    copy_in_words<uint8_t>(src, dst, seg.bytes, first, stride);
  }
}

}  // namespace cuda
}  // namespace fastcomm
