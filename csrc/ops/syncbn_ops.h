// Tensor-level helpers shared by the CPU and CUDA implementations of the
// fastcomm::syncbn_* operators (schemas in syncbn_ops.cpp): memory layout and
// argument checks (syncbn_arguments.cpp).
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

// True when the optional tensor is given (present and defined).
bool given(const std::optional<at::Tensor>& t);

// The argument checks of each operator, the same for every device; errors are
// RuntimeError("fastcomm <op>: ..."). The first returns the channel count.
int64_t check_finalize_stats_args(const at::Tensor& packed, const std::optional<at::Tensor>& running_mean,
                                  const std::optional<at::Tensor>& running_var, at::ScalarType stats_dtype,
                                  const char* op);
void check_normalize_args(const LaidOut& in, const at::Tensor& mean, const at::Tensor& invstd,
                          const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                          const char* op);
void check_grad_sums_args(const LaidOut& in, const at::Tensor& mean, const char* op);
void check_grad_input_args(const LaidOut& in, const at::Tensor& mean, const at::Tensor& invstd,
                           const std::optional<at::Tensor>& weight, const at::Tensor& sums, const at::Tensor& packed,
                           const char* op);

}  // namespace syncbn
}  // namespace fastcomm
