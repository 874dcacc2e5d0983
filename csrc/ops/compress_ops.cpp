// The fastcomm::compress_* operators: schemas and CPU implementations.
//
// fastcomm.hooks calls them once per bucket:
//   fp16/bf16: multi_tensor_pack (scale, cast, limit) -> all_reduce -> multi_tensor_unpack
//   int8:      int8_quantize -> all_gather -> int8_dequantize_sum
//   topk:      topk -> all_gather -> topk_sum
//   sign:      sign -> all_gather -> sign_sum
//   powersgd (CPU, float32, per large matrix): powersgd_project -> all_reduce ->
//              powersgd_back -> all_reduce -> powersgd_approximate
// Payload formats: kernels/compress_format.h. The CUDA implementations register
// themselves from csrc/ops/compress_ops_cuda.cu. Python references of every
// operator: fastcomm/hooks/reference.py.
#include <torch/library.h>

#include <limits>
#include <vector>

#include "core/errors.h"
#include "kernels/compress_format.h"
#include "kernels/cpu/compress_cpu.h"
#include "ops/compress_ops.h"

namespace fastcomm {
namespace compress {

namespace {

// A byte payload whose padding (compress_format.h) is zero: no stray bytes on the wire.
at::Tensor byte_payload(int64_t bytes, int64_t used, const at::Tensor& like) {
  at::Tensor payload = at::empty({bytes}, like.options().dtype(at::kByte));
  payload.narrow(0, used, bytes - used).zero_();
  return payload;
}

void count_clamped(const std::optional<at::Tensor>& clamped, int64_t n) {
  if (clamped.has_value() && clamped->defined() && n > 0) clamped->add_(n);
}

void multi_tensor_pack_cpu(at::TensorList srcs, const at::Tensor& dst, double scale, double limit,
                           const std::optional<at::Tensor>& clamped) {
  // contiguous copies of strided sources, alive until the copy is done
  const std::vector<at::Tensor> held = checked_pack_sources(srcs, dst, limit, clamped, "compress_multi_tensor_pack");
  std::vector<ScaledCopy> pieces;
  int64_t offset = 0;
  for (const at::Tensor& s : held) {
    pieces.push_back({s.const_data_ptr(), s.scalar_type(),
                      static_cast<char*>(dst.data_ptr()) + offset * dst.element_size(), dst.scalar_type(), s.numel()});
    offset += s.numel();
  }
  count_clamped(clamped, scaled_copy_cpu(pieces, scale, limit));
}

void multi_tensor_unpack_cpu(const at::Tensor& src, at::TensorList dsts, double scale) {
  check_unpack_destinations(src, dsts, "compress_multi_tensor_unpack");
  std::vector<ScaledCopy> pieces;
  int64_t offset = 0;
  for (const at::Tensor& d : dsts) {
    pieces.push_back({static_cast<const char*>(src.const_data_ptr()) + offset * src.element_size(), src.scalar_type(),
                      d.data_ptr(), d.scalar_type(), d.numel()});
    offset += d.numel();
  }
  scaled_copy_cpu(pieces, scale, std::numeric_limits<double>::infinity());
}

at::Tensor int8_quantize_cpu_op(const at::Tensor& src, const std::optional<at::Tensor>& error, int64_t block,
                                bool stochastic, int64_t seed) {
  constexpr const char* op = "compress_int8_quantize";
  check_gradient(src, op, "src");
  check_error_buffer(error, src, op);
  check_int8_block(block, op);
  const int64_t n = src.numel();
  at::Tensor payload = byte_payload(int8_payload_bytes(n, block), 4 * int8_num_blocks(n, block) + n, src);
  int8_quantize_cpu(src.const_data_ptr(), src.scalar_type(), error_data(error), src.numel(), block, stochastic,
                    static_cast<uint64_t>(seed), payload.data_ptr<uint8_t>());
  return payload;
}

void int8_dequantize_sum_cpu_op(const at::Tensor& gathered, const at::Tensor& out, int64_t block, double scale) {
  constexpr const char* op = "compress_int8_dequantize_sum";
  check_gradient(out, op, "out");
  check_int8_block(block, op);
  const int64_t ranks = check_gathered(gathered, at::kByte, int8_payload_bytes(out.numel(), block), out, op);
  int8_dequantize_sum_cpu(gathered.const_data_ptr<uint8_t>(), ranks, out.numel(), block, scale, out.data_ptr(),
                          out.scalar_type());
}

at::Tensor topk_cpu_op(const at::Tensor& src, const std::optional<at::Tensor>& error, int64_t k) {
  constexpr const char* op = "compress_topk";
  check_gradient(src, op, "src");
  check_error_buffer(error, src, op);
  check_topk_k(src, k, op);
  at::Tensor payload = at::empty({topk_payload_words(k)}, src.options().dtype(at::kInt));
  topk_compress_cpu(src.const_data_ptr(), src.scalar_type(), error_data(error), src.numel(), k,
                    payload.data_ptr<int32_t>());
  return payload;
}

void topk_sum_cpu_op(const at::Tensor& gathered, const at::Tensor& out, double scale) {
  constexpr const char* op = "compress_topk_sum";
  check_gradient(out, op, "out");
  const auto [ranks, k] = check_topk_gathered(gathered, out, op);
  topk_sum_cpu(gathered.const_data_ptr<int32_t>(), ranks, k, out.numel(), scale, out.data_ptr(), out.scalar_type(), op);
}

at::Tensor sign_cpu_op(const at::Tensor& src, const std::optional<at::Tensor>& error) {
  constexpr const char* op = "compress_sign";
  check_gradient(src, op, "src");
  check_error_buffer(error, src, op);
  at::Tensor payload = byte_payload(sign_payload_bytes(src.numel()), 4 + (src.numel() + 7) / 8, src);
  sign_compress_cpu(src.const_data_ptr(), src.scalar_type(), error_data(error), src.numel(),
                    payload.data_ptr<uint8_t>());
  return payload;
}

void sign_sum_cpu_op(const at::Tensor& gathered, const at::Tensor& out, double scale) {
  constexpr const char* op = "compress_sign_sum";
  check_gradient(out, op, "out");
  const int64_t ranks = check_gathered(gathered, at::kByte, sign_payload_bytes(out.numel()), out, op);
  sign_sum_cpu(gathered.const_data_ptr<uint8_t>(), ranks, out.numel(), scale, out.data_ptr(), out.scalar_type());
}

// m: (rows, cols), q: (cols, r), p: (rows, r); float32, contiguous, same device.
void check_powersgd(const at::Tensor& m, const at::Tensor& p, const at::Tensor& q, const char* op) {
  for (const at::Tensor* t : {&m, &p, &q}) {
    FC_CHECK(t->scalar_type() == at::kFloat && t->dim() == 2 && t->is_contiguous(), op,
             "matrices must be contiguous 2-D float32, got ", t->scalar_type(), " ", t->sizes());
    FC_CHECK(t->device() == m.device(), op, "all matrices must be on ", m.device(), ", one is on ", t->device());
  }
  FC_CHECK(p.size(0) == m.size(0) && q.size(0) == m.size(1) && p.size(1) == q.size(1), op, "shapes do not match: m ",
           m.sizes(), ", p ", p.sizes(), ", q ", q.sizes());
}

void powersgd_project_cpu_op(const at::Tensor& m, const at::Tensor& q, const at::Tensor& p) {
  check_powersgd(m, p, q, "compress_powersgd_project");
  powersgd_project_cpu(m.const_data_ptr<float>(), q.const_data_ptr<float>(), p.data_ptr<float>(), m.size(0), m.size(1),
                       q.size(1));
}

void powersgd_back_cpu_op(const at::Tensor& m, const at::Tensor& p, const at::Tensor& q) {
  check_powersgd(m, p, q, "compress_powersgd_back");
  powersgd_back_cpu(m.const_data_ptr<float>(), p.const_data_ptr<float>(), q.data_ptr<float>(), m.size(0), m.size(1),
                    q.size(1));
}

void powersgd_approximate_cpu_op(const at::Tensor& p, const at::Tensor& q, const at::Tensor& m,
                                 const std::optional<at::Tensor>& error) {
  constexpr const char* op = "compress_powersgd_approximate";
  check_powersgd(m, p, q, op);
  const bool with_error = error.has_value() && error->defined();
  if (with_error) {
    FC_CHECK(error->scalar_type() == at::kFloat && error->is_contiguous() && error->sizes() == m.sizes(), op,
             "error must be a contiguous float32 tensor of m's shape ", m.sizes(), ", got ", error->sizes());
  }
  powersgd_approximate_cpu(p.const_data_ptr<float>(), q.const_data_ptr<float>(), m.data_ptr<float>(),
                           with_error ? error->data_ptr<float>() : nullptr, m.size(0), m.size(1), q.size(1));
}

}  // namespace

}  // namespace compress
}  // namespace fastcomm

TORCH_LIBRARY_FRAGMENT(fastcomm, m) {
  m.def(
      "compress_multi_tensor_pack(Tensor[] srcs, Tensor(a!) dst, float scale, float limit, "
      "Tensor(b!)? clamped=None) -> ()");
  m.def("compress_multi_tensor_unpack(Tensor src, Tensor(a!)[] dsts, float scale) -> ()");
  m.def("compress_int8_quantize(Tensor src, Tensor(a!)? error, int block, bool stochastic, int seed) -> Tensor");
  m.def("compress_int8_dequantize_sum(Tensor gathered, Tensor(a!) out, int block, float scale) -> ()");
  m.def("compress_topk(Tensor src, Tensor(a!)? error, int k) -> Tensor");
  m.def("compress_topk_sum(Tensor gathered, Tensor(a!) out, float scale) -> ()");
  m.def("compress_sign(Tensor src, Tensor(a!)? error) -> Tensor");
  m.def("compress_sign_sum(Tensor gathered, Tensor(a!) out, float scale) -> ()");
  m.def("compress_powersgd_project(Tensor m, Tensor q, Tensor(a!) p) -> ()");
  m.def("compress_powersgd_back(Tensor m, Tensor p, Tensor(a!) q) -> ()");
  m.def("compress_powersgd_approximate(Tensor p, Tensor q, Tensor(a!) m, Tensor(b!)? error) -> ()");
}

TORCH_LIBRARY_IMPL(fastcomm, CPU, m) {
  using namespace fastcomm::compress;
  m.impl("compress_multi_tensor_pack", &multi_tensor_pack_cpu);
  m.impl("compress_multi_tensor_unpack", &multi_tensor_unpack_cpu);
  m.impl("compress_int8_quantize", &int8_quantize_cpu_op);
  m.impl("compress_int8_dequantize_sum", &int8_dequantize_sum_cpu_op);
  m.impl("compress_topk", &topk_cpu_op);
  m.impl("compress_topk_sum", &topk_sum_cpu_op);
  m.impl("compress_sign", &sign_cpu_op);
  m.impl("compress_sign_sum", &sign_sum_cpu_op);
  m.impl("compress_powersgd_project", &powersgd_project_cpu_op);
  m.impl("compress_powersgd_back", &powersgd_back_cpu_op);
  m.impl("compress_powersgd_approximate", &powersgd_approximate_cpu_op);
}
