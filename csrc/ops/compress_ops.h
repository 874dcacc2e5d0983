// Argument checks shared by the CPU and CUDA implementations of the
// fastcomm::compress_* operators (schemas in compress_ops.cpp). Each raises
// RuntimeError("fastcomm compress_<op>: ...") naming what is wrong.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <utility>
#include <vector>

namespace fastcomm {
namespace compress {

// A contiguous tensor of float32, float64, bfloat16 or float16.
void check_gradient(const at::Tensor& t, const char* op, const char* name);

// error: absent, or float32, contiguous, of src's numel and device.
void check_error_buffer(const std::optional<at::Tensor>& error, const at::Tensor& src, const char* op);

// clamped: absent, or an int64 tensor of one element on `device`.
void check_clamped_counter(const std::optional<at::Tensor>& clamped, c10::Device device, const char* op);

// gathered: a contiguous 2-D [ranks, row_elements] tensor of dtype on out's
// device, ranks >= 1. Returns ranks.
int64_t check_gathered(const at::Tensor& gathered, at::ScalarType dtype, int64_t row_elements, const at::Tensor& out,
                       const char* op);

void check_int8_block(int64_t block, const char* op);

// k in [1, numel], numel within int32 indices.
void check_topk_k(const at::Tensor& src, int64_t k, const char* op);

// gathered: [ranks, 2k] int32 payloads for `out`. Returns {ranks, k}.
std::pair<int64_t, int64_t> check_topk_gathered(const at::Tensor& gathered, const at::Tensor& out, const char* op);

// multi_tensor_pack's checks (dst, limit > 0, counter, every source's device,
// dtype and the total size); returns the sources made contiguous (held by the
// caller while it copies from them).
std::vector<at::Tensor> checked_pack_sources(at::TensorList srcs, const at::Tensor& dst, double limit,
                                             const std::optional<at::Tensor>& clamped, const char* op);

// multi_tensor_unpack's checks (src, every destination's device, dtype,
// contiguity and the total size).
void check_unpack_destinations(const at::Tensor& src, at::TensorList dsts, const char* op);

// The float32 pointer of an optional error buffer, or null.
float* error_data(const std::optional<at::Tensor>& error);

}  // namespace compress
}  // namespace fastcomm
