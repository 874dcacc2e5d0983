// A byte range to copy: the unit of the multi-tensor pack/unpack kernels.
// Torch-free so the CPU and CUDA kernels share it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastcomm {

struct CopySegment {
  const void* src;
  void* dst;
  size_t bytes;
};

}  // namespace fastcomm
