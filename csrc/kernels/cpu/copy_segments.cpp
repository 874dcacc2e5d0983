#include "kernels/cpu/copy_segments.h"

#include <cstring>
#include <vector>

#include <ATen/Parallel.h>

namespace fastcomm {

namespace {

// Below this many bytes in total a single thread is faster than waking others.
constexpr size_t kParallelBytes = 1 << 20;
// Large segments are split into pieces of this size so threads share them.
constexpr size_t kPieceBytes = 256 << 10;

}  // namespace

void copy_segments_cpu(const CopySegment* segments, size_t count) {
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

}  // namespace fastcomm
