#include "algorithms/shm_common.h"

#include <algorithm>

#include "kernels/cpu/reduce.h"

namespace fastcomm {

bool shm_eligible(const Collective& c) {
  if (c.device != c10::DeviceType::CPU || c.is_p2p()) return false;
  return !c.any_tensor(
      [](const at::Tensor& t) { return t.defined() && (t.layout() != c10::kStrided || !t.is_contiguous()); });
}

bool shm_reduces_one_tensor(const Collective& c) {
  return shm_eligible(c) && c.inputs.size() == 1 &&
         cpu_kernel_reduction(c.reduce_op, c.inputs[0].scalar_type()).has_value();
}

ShmReduction shm_reduction(const Collective& c) {
  const at::Tensor& t = c.inputs[0];
  return {byte_ptr(t), t.scalar_type(), *cpu_kernel_reduction(c.reduce_op, t.scalar_type()), t.nbytes(),
          static_cast<size_t>(t.element_size())};
}

shm::OpDescriptor shm_describe(uint16_t algorithm, const Collective& c, int64_t input_bytes, int64_t output_bytes,
                               int root) {
  shm::OpDescriptor d{};
  d.type = static_cast<int8_t>(c.type);
  d.algorithm = algorithm;
  const at::ScalarType dtype = c.dtype();
  d.dtype = dtype == at::ScalarType::Undefined ? -1 : static_cast<int16_t>(dtype);
  d.reduce_op = c.is_reduction() ? static_cast<int8_t>(c.reduce_op.op_) : -1;
  d.root = static_cast<int16_t>(root);
  d.input_bytes = static_cast<uint64_t>(input_bytes);
  d.output_bytes = static_cast<uint64_t>(output_bytes);
  return d;
}

void descriptor_to_fields(const shm::OpDescriptor& d, int64_t* fields) {
  fields[0] = d.type;
  fields[1] = d.dtype;
  fields[2] = d.reduce_op;
  fields[3] = d.root;
  fields[4] = d.algorithm;
  fields[5] = static_cast<int64_t>(d.input_bytes);
  fields[6] = static_cast<int64_t>(d.output_bytes);
}

shm::OpDescriptor descriptor_from_fields(const int64_t* fields) {
  shm::OpDescriptor d{};
  d.type = static_cast<int8_t>(fields[0]);
  d.dtype = static_cast<int16_t>(fields[1]);
  d.reduce_op = static_cast<int8_t>(fields[2]);
  d.root = static_cast<int16_t>(fields[3]);
  d.algorithm = static_cast<uint16_t>(fields[4]);
  d.input_bytes = static_cast<uint64_t>(fields[5]);
  d.output_bytes = static_cast<uint64_t>(fields[6]);
  return d;
}

namespace {

// One engine op, now, on this thread: null, or what stopped it.
std::exception_ptr run_engine_op(shm::Engine& engine, const Collective& c, const shm::OpDescriptor& descriptor,
                                 const std::function<void()>& body, std::chrono::milliseconds grace,
                                 std::chrono::steady_clock::time_point issued) {
  std::lock_guard<std::mutex> one_op_at_a_time(engine.op_mutex());
  std::exception_ptr error;
  try {
    engine.begin(c.name, descriptor, c.timeout + grace, issued);
    body();
  } catch (...) {
    error = std::current_exception();
  }
  engine.end();
  return error;
}

}  // namespace

Launched shm_run(shm::Engine& engine, const Collective& c, const shm::OpDescriptor& descriptor,
                 const std::function<void()>& body, std::chrono::milliseconds grace) {
  engine.queue().drain();  // ops issued before this one, queued, go first
  std::exception_ptr error = run_engine_op(engine, c, descriptor, body, grace, std::chrono::steady_clock::now());
  return error ? failed(error) : finished();
}

Launched shm_run_sized(shm::Engine& engine, const Collective& c, const shm::OpDescriptor& descriptor,
                       std::function<void()> body, int64_t async_min_bytes, size_t bytes) {
  const bool queued = !c.blocking && async_min_bytes > 0 && bytes >= static_cast<size_t>(async_min_bytes);
  if (!queued || engine.queue().on_queue_thread()) return shm_run(engine, c, descriptor, body);
  Launched launched = pending();
  launched.self_timed = true;
  // The engine outlives its queued jobs (op_queue.h), so the job may hold it by reference.
  const auto issued = std::chrono::steady_clock::now();
  engine.queue().push([&engine, c, descriptor, body = std::move(body), future = launched.future, issued]() {
    std::exception_ptr error = run_engine_op(engine, c, descriptor, body, std::chrono::milliseconds(0), issued);
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(c10::IValue(c.result_tensors()));
    }
  });
  return launched;
}

void reduce_into_both(c10::ScalarType dtype, ReduceKind kind, const void* const* srcs, int n, void* dst, void* copy,
                      int64_t count, size_t element) {
  constexpr size_t kBlockBytes = 16 * 1024;  // a third of a 48 KiB L1d: the block's sources and result stay there
  const int64_t per_block = std::max<int64_t>(1, static_cast<int64_t>(kBlockBytes / element));
  std::vector<const void*> block(n);
  for (int64_t at = 0; at < count; at += per_block) {
    const int64_t len = std::min(per_block, count - at);
    const size_t offset = static_cast<size_t>(at) * element;
    for (int q = 0; q < n; ++q) block[q] = static_cast<const char*>(srcs[q]) + offset;
    kernels::reduce(dtype, kind, block.data(), n, static_cast<char*>(dst) + offset, len);
    copy_bytes(static_cast<char*>(copy) + offset, static_cast<char*>(dst) + offset, static_cast<size_t>(len) * element);
  }
}

void alltoall_blocks(const at::Tensor& t, const std::vector<int64_t>& splits, int n, std::vector<uint64_t>& offsets,
                     std::vector<uint64_t>& lengths) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const uint64_t row_bytes = rows == 0 ? 0 : t.nbytes() / rows;
  uint64_t at = 0;
  for (int q = 0; q < n; ++q) {
    const int64_t count = splits.empty() ? rows / n : splits[q];
    offsets[q] = at;
    lengths[q] = static_cast<uint64_t>(count) * row_bytes;
    at += lengths[q];
  }
}

int ShmTopology::local_rank_of(int r) const {
  int local = 0;
  for (int q = 0; q < r; ++q) local += host_of_rank[q] == host_of_rank[r];
  return local;
}

}  // namespace fastcomm
