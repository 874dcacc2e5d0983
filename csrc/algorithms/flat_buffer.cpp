#include "algorithms/flat_buffer.h"

#include "core/device_registry.h"

namespace fastcomm {

namespace {

int64_t total_numel(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

std::vector<CopySegment> concatenated_segments(const at::Tensor& flat, const std::vector<at::Tensor>& tensors,
                                               bool to_flat) {
  std::vector<CopySegment> segments;
  auto* base = static_cast<char*>(flat.data_ptr());
  size_t offset = 0;
  for (const auto& t : tensors) {
    const size_t bytes = t.numel() * t.element_size();
    if (to_flat) {
      segments.push_back({t.data_ptr(), base + offset, bytes});
    } else {
      segments.push_back({base + offset, t.data_ptr(), bytes});
    }
    offset += bytes;
  }
  return segments;
}

void copy_segments(c10::Device device, const std::vector<CopySegment>& segments) {
  CopySegmentsFn fn = find_copy_segments(device.type());
  TORCH_INTERNAL_ASSERT(fn, "fastcomm: no copy kernel for ", device);
  fn(segments.data(), segments.size(), device);
}

void check_flat(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(flat.is_contiguous() && flat.numel() == total_numel(tensors), "fastcomm pack: flat buffer has ",
              flat.numel(), " elements, the tensors ", total_numel(tensors));
  for (const auto& t : tensors) {
    TORCH_CHECK(t.is_contiguous() && t.scalar_type() == flat.scalar_type() && t.device() == flat.device(),
                "fastcomm pack: tensors must be contiguous and match the flat buffer's dtype (", flat.scalar_type(),
                ") and device (", flat.device(), "); got ", t.scalar_type(), " on ", t.device());
  }
}

}  // namespace

bool can_pack(c10::DeviceType device) {
  return find_copy_segments(device) != nullptr;
}

at::Tensor pack(const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(!tensors.empty(), "fastcomm pack: needs at least one tensor");
  at::Tensor flat = at::empty({total_numel(tensors)}, tensors[0].options());
  pack_into(flat, tensors);
  return flat;
}

void pack_into(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  check_flat(flat, tensors);
  copy_segments(flat.device(), concatenated_segments(flat, tensors, /*to_flat=*/true));
}

void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  check_flat(flat, tensors);
  copy_segments(flat.device(), concatenated_segments(flat, tensors, /*to_flat=*/false));
}

std::vector<at::Tensor> rank_chunks(const at::Tensor& t, int64_t world_size) {
  const int64_t n = t.numel() / world_size;
  std::vector<at::Tensor> chunks;
  at::Tensor flat = t.view(-1);
  for (int64_t r = 0; r < world_size; ++r) chunks.push_back(flat.narrow(0, r * n, n));
  return chunks;
}

std::vector<std::vector<size_t>> group_by_dtype(const std::vector<at::Tensor>& tensors) {
  std::vector<std::vector<size_t>> groups;
  std::vector<at::ScalarType> keys;
  for (size_t i = 0; i < tensors.size(); ++i) {
    size_t g = 0;
    while (g < keys.size() && keys[g] != tensors[i].scalar_type()) ++g;
    if (g == keys.size()) {
      keys.push_back(tensors[i].scalar_type());
      groups.emplace_back();
    }
    groups[g].push_back(i);
  }
  return groups;
}

}  // namespace fastcomm
