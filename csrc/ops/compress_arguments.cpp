#include "ops/compress_ops.h"

#include <cstdint>
#include <limits>

#include "core/errors.h"

namespace fastcomm {
namespace compress {

namespace {

bool given(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined();
}

}  // namespace

void check_gradient(const at::Tensor& t, const char* op, const char* name) {
  const auto dtype = t.scalar_type();
  FC_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kBFloat16 || dtype == at::kHalf, op, name,
           " must be float32, float64, bfloat16 or float16, got ", dtype);
  FC_CHECK(t.is_contiguous(), op, name, " must be contiguous (sizes ", t.sizes(), ", strides ", t.strides(), ")");
}

void check_error_buffer(const std::optional<at::Tensor>& error, const at::Tensor& src, const char* op) {
  if (!given(error)) return;
  FC_CHECK(error->scalar_type() == at::kFloat, op, "the error-feedback buffer must be float32, got ",
           error->scalar_type());
  FC_CHECK(error->is_contiguous(), op, "the error-feedback buffer must be contiguous");
  FC_CHECK(error->numel() == src.numel(), op, "the error-feedback buffer has ", error->numel(),
           " elements, the gradient ", src.numel());
  FC_CHECK(error->device() == src.device(), op, "the error-feedback buffer is on ", error->device(),
           ", the gradient on ", src.device());
}

void check_clamped_counter(const std::optional<at::Tensor>& clamped, c10::Device device, const char* op) {
  if (!given(clamped)) return;
  FC_CHECK(clamped->scalar_type() == at::kLong && clamped->numel() == 1, op,
           "the clamped counter must be one int64 element, got ", clamped->scalar_type(), " of ", clamped->numel());
  FC_CHECK(clamped->device() == device, op, "the clamped counter is on ", clamped->device(), ", the data on ", device);
}

int64_t check_gathered(const at::Tensor& gathered, at::ScalarType dtype, int64_t row_elements, const at::Tensor& out,
                       const char* op) {
  FC_CHECK(gathered.scalar_type() == dtype, op, "the gathered payloads must be ", dtype, ", got ",
           gathered.scalar_type());
  FC_CHECK(gathered.dim() == 2 && gathered.size(0) >= 1 && gathered.size(1) == row_elements, op,
           "the gathered payloads must be [ranks, ", row_elements, "] for this output, got ", gathered.sizes());
  FC_CHECK(gathered.is_contiguous(), op, "the gathered payloads must be contiguous");
  // The CUDA kernels read every row's float32 scales and int32 words in place (compress_format.h):
  // a buffer that starts 4-byte aligned keeps them aligned, and a misaligned load faults. Refused
  // on every device, so that CPU and CUDA take the same inputs.
  const auto misaligned = reinterpret_cast<uintptr_t>(gathered.const_data_ptr()) % 4;
  FC_CHECK(misaligned == 0, op, "the gathered payloads must start 4-byte aligned, they start ", misaligned,
           " byte(s) past a multiple of 4");
  FC_CHECK(gathered.device() == out.device(), op, "the gathered payloads are on ", gathered.device(),
           ", the output on ", out.device());
  return gathered.size(0);
}

void check_int8_block(int64_t block, const char* op) {
  FC_CHECK(block >= 1 && block <= (1 << 20), op, "block must be in [1, 1048576], got ", block);
}

void check_topk_k(const at::Tensor& src, int64_t k, const char* op) {
  FC_CHECK(src.numel() <= std::numeric_limits<int32_t>::max(), op, "at most 2^31-1 elements (int32 indices), got ",
           src.numel());
  FC_CHECK(k >= 1 && k <= src.numel(), op, "k must be in [1, ", src.numel(), "], got ", k);
}

std::pair<int64_t, int64_t> check_topk_gathered(const at::Tensor& gathered, const at::Tensor& out, const char* op) {
  FC_CHECK(gathered.dim() == 2 && gathered.size(1) % 2 == 0 && gathered.size(1) > 0, op,
           "the gathered payloads must be [ranks, 2k], got ", gathered.sizes());
  const int64_t k = gathered.size(1) / 2;
  check_topk_k(out, k, op);
  return {check_gathered(gathered, at::kInt, 2 * k, out, op), k};
}

std::vector<at::Tensor> checked_pack_sources(at::TensorList srcs, const at::Tensor& dst, double limit,
                                             const std::optional<at::Tensor>& clamped, const char* op) {
  check_gradient(dst, op, "dst");
  FC_CHECK(limit > 0, op, "limit must be > 0, got ", limit);
  check_clamped_counter(clamped, dst.device(), op);
  std::vector<at::Tensor> contiguous;
  int64_t total = 0;
  for (size_t i = 0; i < srcs.size(); ++i) {
    FC_CHECK(srcs[i].device() == dst.device(), op, "srcs[", i, "] is on ", srcs[i].device(), ", dst on ", dst.device());
    contiguous.push_back(srcs[i].contiguous());
    check_gradient(contiguous.back(), op, "each source");
    total += srcs[i].numel();
    FC_CHECK(total <= dst.numel(), op, "the sources hold more than dst's ", dst.numel(), " elements");
  }
  return contiguous;
}

void check_unpack_destinations(const at::Tensor& src, at::TensorList dsts, const char* op) {
  check_gradient(src, op, "src");
  int64_t total = 0;
  for (size_t i = 0; i < dsts.size(); ++i) {
    FC_CHECK(dsts[i].device() == src.device(), op, "dsts[", i, "] is on ", dsts[i].device(), ", src on ", src.device());
    check_gradient(dsts[i], op, "each destination");
    total += dsts[i].numel();
    FC_CHECK(total <= src.numel(), op, "the destinations hold more than src's ", src.numel(), " elements");
  }
}

float* error_data(const std::optional<at::Tensor>& error) {
  return given(error) ? error->data_ptr<float>() : nullptr;
}

}  // namespace compress
}  // namespace fastcomm
