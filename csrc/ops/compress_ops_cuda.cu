// Adapter: the CUDA implementations of the fastcomm::compress_* operators
// (schemas in csrc/ops/compress_ops.cpp), registered with the torch dispatcher
// at load time of _C. Arguments are checked as on CPU (ops/compress_ops.h);
// everything runs on the current stream and nothing waits for the device
// (the clamped counter, the sign scale and top-k's selection stay on it).
// Top-k's selection is composed of ATen ops (topk for the threshold,
// nonzero_static for a fixed-size index list); the rest are kernels from
// compress.cuh.
#include <algorithm>
#include <limits>

#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "core/errors.h"
#include "kernels/cuda/compress.cuh"
#include "ops/compress_ops.h"

namespace fastcomm {
namespace compress {
namespace cuda {

namespace {

unsigned blocks_for(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(wanted, 65535)));
}

#define FASTCOMM_DISPATCH_GRAD_TYPES(dtype, op, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, op, __VA_ARGS__)

void launch_scaled_copy(const at::Tensor& src, int64_t src_offset, const at::Tensor& dst, int64_t dst_offset,
                        int64_t count, double scale, double limit, unsigned long long* clamped, cudaStream_t stream) {
  if (count == 0) return;
  FASTCOMM_DISPATCH_GRAD_TYPES(src.scalar_type(), "compress_multi_tensor_pack", [&] {
    using Src = scalar_t;
    FASTCOMM_DISPATCH_GRAD_TYPES(dst.scalar_type(), "compress_multi_tensor_pack", [&] {
      using Dst = scalar_t;
      using Acc = std::conditional_t<std::is_same_v<Src, double> || std::is_same_v<Dst, double>, double, float>;
      scaled_copy_kernel<Src, Dst, Acc><<<blocks_for(count), kThreads, 0, stream>>>(
          src.const_data_ptr<Src>() + src_offset, dst.data_ptr<Dst>() + dst_offset, count, static_cast<Acc>(scale),
          static_cast<Acc>(limit), clamped);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
}

// One launch per tensor: the dtype conversion, scale and limit are fused; the
// tensors are not (a multi_tensor_apply-style launch would be the next step).
void multi_tensor_pack_cuda(at::TensorList srcs, const at::Tensor& dst, double scale, double limit,
                            const std::optional<at::Tensor>& clamped) {
  const std::vector<at::Tensor> sources = checked_pack_sources(srcs, dst, limit, clamped, "compress_multi_tensor_pack");
  c10::cuda::CUDAGuard guard(dst.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  auto* counter = clamped.has_value() && clamped->defined()
                      ? reinterpret_cast<unsigned long long*>(clamped->data_ptr<int64_t>())
                      : nullptr;
  int64_t offset = 0;
  for (const at::Tensor& s : sources) {
    launch_scaled_copy(s, 0, dst, offset, s.numel(), scale, limit, counter, stream);
    offset += s.numel();
  }
}

void multi_tensor_unpack_cuda(const at::Tensor& src, at::TensorList dsts, double scale) {
  check_unpack_destinations(src, dsts, "compress_multi_tensor_unpack");
  c10::cuda::CUDAGuard guard(src.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  int64_t offset = 0;
  for (size_t i = 0; i < dsts.size(); ++i) {
    launch_scaled_copy(src, offset, dsts[i], 0, dsts[i].numel(), scale, std::numeric_limits<double>::infinity(),
                       nullptr, stream);
    offset += dsts[i].numel();
  }
}

at::Tensor int8_quantize_cuda(const at::Tensor& src, const std::optional<at::Tensor>& error, int64_t block,
                              bool stochastic, int64_t seed) {
  constexpr const char* op = "compress_int8_quantize";
  check_gradient(src, op, "src");
  check_error_buffer(error, src, op);
  check_int8_block(block, op);
  c10::cuda::CUDAGuard guard(src.device());
  const int64_t n = src.numel();
  const int64_t blocks = int8_num_blocks(n, block);
  at::Tensor payload = at::zeros({int8_payload_bytes(n, block)}, src.options().dtype(at::kByte));
  if (n == 0) return payload;
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  FASTCOMM_DISPATCH_GRAD_TYPES(src.scalar_type(), op, [&] {
    using Acc = at::opmath_type<scalar_t>;
    uint8_t* p = payload.data_ptr<uint8_t>();
    TORCH_CHECK(blocks <= std::numeric_limits<int32_t>::max(), "fastcomm ", op, ": too many blocks");
    int8_quantize_kernel<scalar_t, Acc><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        src.const_data_ptr<scalar_t>(), error_data(error), n, block, stochastic, static_cast<uint64_t>(seed),
        reinterpret_cast<float*>(p), reinterpret_cast<int8_t*>(p + 4 * blocks));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return payload;
}

void int8_dequantize_sum_cuda(const at::Tensor& gathered, const at::Tensor& out, int64_t block, double scale) {
  constexpr const char* op = "compress_int8_dequantize_sum";
  check_gradient(out, op, "out");
  check_int8_block(block, op);
  const int64_t bytes = int8_payload_bytes(out.numel(), block);
  const int64_t ranks = check_gathered(gathered, at::kByte, bytes, out, op);
  c10::cuda::CUDAGuard guard(out.device());
  if (out.numel() == 0) return;
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  FASTCOMM_DISPATCH_GRAD_TYPES(out.scalar_type(), op, [&] {
    int8_dequantize_sum_kernel<scalar_t><<<blocks_for(out.numel()), kThreads, 0, stream>>>(
        gathered.const_data_ptr<uint8_t>(), ranks, out.numel(), block, bytes, static_cast<float>(scale),
        out.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

// The CPU kernel's selection in ATen ops: threshold t = the k-th largest
// magnitude (NaN as inf), everything above t, then elements equal to t in
// index order until k; ascending indices.
at::Tensor topk_cuda(const at::Tensor& src, const std::optional<at::Tensor>& error, int64_t k) {
  constexpr const char* op = "compress_topk";
  check_gradient(src, op, "src");
  check_error_buffer(error, src, op);
  check_topk_k(src, k, op);
  c10::cuda::CUDAGuard guard(src.device());
  at::Tensor x = src.reshape(-1).to(at::kFloat);
  if (error.has_value() && error->defined()) {
    error->add_(x);
    x = *error;
  }
  const at::Tensor mags =
      at::where(x.isnan(), at::full({}, std::numeric_limits<float>::infinity(), x.options()), x.abs());
  const at::Tensor threshold = std::get<0>(at::topk(mags, k, 0, true, false)).min();
  const at::Tensor above = mags.gt(threshold);
  const at::Tensor equal = mags.eq(threshold);
  const at::Tensor room = k - above.sum();
  const at::Tensor take = above.logical_or(equal.logical_and(equal.cumsum(0).le(room)));
  const at::Tensor indices = at::nonzero_static(take, k, -1).reshape(-1);
  const at::Tensor values = x.index_select(0, indices);
  if (error.has_value() && error->defined()) {
    error->index_fill_(0, indices, 0.0f);
    error->nan_to_num_(0.0, 0.0, 0.0);
  }
  return at::cat({values.view(at::kInt), indices.to(at::kInt)});
}

void topk_sum_cuda(const at::Tensor& gathered, const at::Tensor& out, double scale) {
  constexpr const char* op = "compress_topk_sum";
  check_gradient(out, op, "out");
  const auto [ranks, k] = check_topk_gathered(gathered, out, op);
  c10::cuda::CUDAGuard guard(out.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  at::Tensor acc = at::zeros({out.numel()}, out.options().dtype(at::kFloat));
  for (int64_t r = 0; r < ranks; ++r) {
    topk_scatter_add_kernel<<<blocks_for(k), kThreads, 0, stream>>>(gathered.const_data_ptr<int32_t>() + r * 2 * k, k,
                                                                    out.numel(), acc.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  FASTCOMM_DISPATCH_GRAD_TYPES(out.scalar_type(), op, [&] {
    scale_into_kernel<scalar_t><<<blocks_for(out.numel()), kThreads, 0, stream>>>(
        acc.const_data_ptr<float>(), out.numel(), static_cast<float>(scale), out.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

at::Tensor sign_cuda(const at::Tensor& src, const std::optional<at::Tensor>& error) {
  constexpr const char* op = "compress_sign";
  check_gradient(src, op, "src");
  check_error_buffer(error, src, op);
  c10::cuda::CUDAGuard guard(src.device());
  const int64_t n = src.numel();
  at::Tensor payload = at::zeros({sign_payload_bytes(n)}, src.options().dtype(at::kByte));
  if (n == 0) return payload;
  at::Tensor x = src.reshape(-1).to(at::kFloat);
  if (error.has_value() && error->defined()) x = x + *error;
  const at::Tensor abs_sum = x.abs().sum(0, false, at::kDouble);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  FASTCOMM_DISPATCH_GRAD_TYPES(src.scalar_type(), op, [&] {
    sign_compress_kernel<scalar_t><<<blocks_for((n + 7) / 8), kThreads, 0, stream>>>(
        src.const_data_ptr<scalar_t>(), error_data(error), n, abs_sum.const_data_ptr<double>(),
        payload.data_ptr<uint8_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return payload;
}

void sign_sum_cuda(const at::Tensor& gathered, const at::Tensor& out, double scale) {
  constexpr const char* op = "compress_sign_sum";
  check_gradient(out, op, "out");
  const int64_t bytes = sign_payload_bytes(out.numel());
  const int64_t ranks = check_gathered(gathered, at::kByte, bytes, out, op);
  c10::cuda::CUDAGuard guard(out.device());
  if (out.numel() == 0) return;
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  FASTCOMM_DISPATCH_GRAD_TYPES(out.scalar_type(), op, [&] {
    sign_sum_kernel<scalar_t>
        <<<blocks_for(out.numel()), kThreads, 0, stream>>>(gathered.const_data_ptr<uint8_t>(), ranks, out.numel(),
                                                           bytes, static_cast<float>(scale), out.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace

}  // namespace cuda
}  // namespace compress
}  // namespace fastcomm

TORCH_LIBRARY_IMPL(fastcomm, CUDA, m) {
  using namespace fastcomm::compress::cuda;
  m.impl("compress_multi_tensor_pack", &multi_tensor_pack_cuda);
  m.impl("compress_multi_tensor_unpack", &multi_tensor_unpack_cuda);
  m.impl("compress_int8_quantize", &int8_quantize_cuda);
  m.impl("compress_int8_dequantize_sum", &int8_dequantize_sum_cuda);
  m.impl("compress_topk", &topk_cuda);
  m.impl("compress_topk_sum", &topk_sum_cuda);
  m.impl("compress_sign", &sign_cuda);
  m.impl("compress_sign_sum", &sign_sum_cuda);
}
