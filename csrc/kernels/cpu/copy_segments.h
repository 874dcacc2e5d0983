// Copies many byte ranges in one call, in parallel over segments and over the
// bytes of large ones. Segments must not overlap each other.
#pragma once

#include <cstddef>

#include "kernels/copy_segment.h"

namespace fastcomm {

void copy_segments_cpu(const CopySegment* segments, size_t count);

}  // namespace fastcomm
