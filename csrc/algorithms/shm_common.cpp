#include "algorithms/shm_common.h"

namespace fastcomm {

std::optional<kernels::ReduceKind> shm_reduce_kind(const c10d::ReduceOp& op, at::ScalarType dtype) {
  using kernels::ReduceKind;
  std::optional<ReduceKind> kind;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      kind = ReduceKind::Sum;
      break;
    case c10d::ReduceOp::PRODUCT:
      kind = ReduceKind::Product;
      break;
    case c10d::ReduceOp::MIN:
      kind = ReduceKind::Min;
      break;
    case c10d::ReduceOp::MAX:
      kind = ReduceKind::Max;
      break;
    case c10d::ReduceOp::BAND:
      kind = ReduceKind::BitAnd;
      break;
    case c10d::ReduceOp::BOR:
      kind = ReduceKind::BitOr;
      break;
    case c10d::ReduceOp::BXOR:
      kind = ReduceKind::BitXor;
      break;
    default:
      return std::nullopt;  // AVG was rewritten to SUM before; PREMUL_SUM is CUDA-only
  }
  if (!kernels::reduce_supported(dtype, *kind)) return std::nullopt;
  return kind;
}

bool shm_eligible(const Collective& c) {
  if (c.device != c10::DeviceType::CPU || c.is_p2p()) return false;
  for (const auto& t : c.all_tensors()) {
    if (t.defined() && (t.layout() != c10::kStrided || !t.is_contiguous())) return false;
  }
  return true;
}

shm::OpDescriptor shm_describe(const Collective& c, int64_t input_bytes, int64_t output_bytes, int root) {
  shm::OpDescriptor d{};
  d.type = static_cast<int32_t>(c.type);
  const at::ScalarType dtype = c.dtype();
  d.dtype = dtype == at::ScalarType::Undefined ? -1 : static_cast<int32_t>(dtype);
  d.reduce_op = c.is_reduction() ? static_cast<int32_t>(c.reduce_op.op_) : -1;
  d.root = root;
  d.input_bytes = static_cast<uint64_t>(input_bytes);
  d.output_bytes = static_cast<uint64_t>(output_bytes);
  return d;
}

Launched shm_run(shm::Engine& engine, const Collective& c, const shm::OpDescriptor& descriptor,
                 const std::function<void()>& body) {
  std::lock_guard<std::mutex> one_op_at_a_time(engine.op_mutex());
  try {
    engine.begin(c.name, descriptor, c.timeout);
    body();
  } catch (...) {
    return failed(std::current_exception());
  }
  return completed(c.result_tensors());
}

int ShmTopology::local_rank_of(int r) const {
  int local = 0;
  for (int q = 0; q < r; ++q) local += host_of_rank[q] == host_of_rank[r];
  return local;
}

void shm_broadcast_chunks(shm::Engine& engine, char* data, size_t total, int root) {
  const bool is_root = engine.local_rank() == root;
  size_t offset = 0;
  do {  // at least one round, so even empty tensors are compared across ranks
    const size_t len = std::min(engine.slot_bytes(), total - offset);
    engine.start_use();
    if (is_root) copy_bytes(engine.my_slot(), data + offset, len);
    engine.round();
    if (!is_root) copy_bytes(data + offset, engine.slot_of(root), len);
    offset += len;
  } while (offset < total);
}

}  // namespace fastcomm
