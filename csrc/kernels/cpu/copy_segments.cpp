// The CPU kernel behind the device registry's copy_segments: copies many byte
// ranges in one call, in parallel over segments and over the bytes of large
// ones. Segments must not overlap each other. Registers itself at load time
// of _C (core/device_registry.h), as the CUDA kernel does.
#include <cstring>
#include <vector>

#include <ATen/Parallel.h>

#include "core/device_registry.h"

namespace fastcomm {

namespace {

// Below this many bytes in total a single thread is faster than waking others.
constexpr size_t kParallelBytes = 1 << 20;
// Large segments are split into pieces of this size so threads share them.
constexpr size_t kPieceBytes = 256 << 10;

void copy_segments_cpu(const CopySegment* segments, size_t count, c10::Device) {
  size_t total = 0;
  for (size_t i = 0; i < count; ++i) total += segments[i].bytes;
  if (total < kParallelBytes) {
    for (size_t i = 0; i < count; ++i) {
      if (segments[i].bytes) std::memcpy(segments[i].dst, segments[i].src, segments[i].bytes);
    }
    return;
  }
  std::vector<CopySegment> pieces;
  for (size_t i = 0; i < count; ++i) {
    const auto* src = static_cast<const char*>(segments[i].src);
    auto* dst = static_cast<char*>(segments[i].dst);
    for (size_t off = 0; off < segments[i].bytes; off += kPieceBytes) {
      size_t n = std::min(kPieceBytes, segments[i].bytes - off);
      pieces.push_back({src + off, dst + off, n});
    }
  }
  at::parallel_for(0, static_cast<int64_t>(pieces.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) std::memcpy(pieces[i].dst, pieces[i].src, pieces[i].bytes);
  });
}

const bool registered = [] {
  register_copy_segments(c10::DeviceType::CPU, &copy_segments_cpu);
  return true;
}();

}  // namespace

}  // namespace fastcomm
