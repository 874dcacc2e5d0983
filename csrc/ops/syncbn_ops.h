// Tensor-level helpers shared by the CPU and CUDA implementations of the
// fastcomm::syncbn_* operators (schemas in syncbn_ops.cpp).
//
// The operators are registered with the torch dispatcher (TORCH_LIBRARY), so a
// call from Python, torch.ops.fastcomm.<name>, reaches the CPU kernels or,
// when csrc/kernels/cuda/ is compiled, the CUDA ones for CUDA tensors.
#pragma once

#include <ATen/ATen.h>

#include "kernels/syncbn_math.h"

namespace fastcomm {
namespace syncbn {

// A tensor (N, C, *spatial) in a memory layout the kernels read directly.
struct LaidOut {
  at::Tensor tensor;     // the input itself, or a contiguous copy
  ChannelLayout layout;  // its [rows][channels][inner] view
  bool channels_last;    // C innermost (dense), as channels_last / channels_last_3d
};

// `input` itself when it is NC*-contiguous or dense with C innermost (any
// rank >= 3), otherwise a contiguous copy. Checks dim >= 2 and C > 0.
LaidOut lay_out(const at::Tensor& input, const char* op);

// `t` (same shape as `like`) in like's memory layout, copied when its strides
// differ (grad_output may arrive in another memory format than the input).
at::Tensor in_layout_of(const at::Tensor& t, const LaidOut& like, const char* op);

// The dtype of statistics and coefficients for elements of `dtype`:
// float64 for float64, float32 for float32, float16 and bfloat16.
at::ScalarType stats_dtype_for(at::ScalarType dtype);

// Checks that `t` is a 1-D tensor of `numel` elements on `device` (and of
// `dtype` unless it is Undefined).
void check_vector(const at::Tensor& t, int64_t numel, c10::Device device, at::ScalarType dtype, const char* op,
                  const char* name);

// The number of channels that a packed statistics buffer of 1 + 2C float64 values describes.
int64_t channels_of_packed_stats(const at::Tensor& packed, const char* op);

}  // namespace syncbn
}  // namespace fastcomm
