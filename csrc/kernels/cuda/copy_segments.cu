// Adapter: launches copy_segments_kernel on the current stream and registers it
// for CUDA tensors in the device registry at load time of _C.
#include <algorithm>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "core/device_registry.h"
#include "kernels/cuda/copy_segments.cuh"

namespace fastcomm {
namespace cuda {

namespace {

void copy_segments_cuda(const CopySegment* segments, size_t count, c10::Device device) {
  c10::cuda::CUDAGuard guard(device);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  constexpr int kThreads = 256;
  for (size_t begin = 0; begin < count; begin += kMaxSegments) {
    SegmentBatch batch{};
    batch.count = static_cast<int>(std::min<size_t>(kMaxSegments, count - begin));
    size_t largest = 0;
    for (int i = 0; i < batch.count; ++i) {
      batch.segments[i] = segments[begin + i];
      largest = std::max(largest, segments[begin + i].bytes);
    }
    if (largest == 0) continue;
    const size_t blocks = std::min<size_t>((largest / 16 + kThreads - 1) / kThreads + 1, 1024);
    dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(batch.count));
    copy_segments_kernel<<<grid, kThreads, 0, stream>>>(batch);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

const bool registered = [] {
  register_copy_segments(c10::DeviceType::CUDA, &copy_segments_cuda);
  return true;
}();

}  // namespace

}  // namespace cuda
}  // namespace fastcomm
