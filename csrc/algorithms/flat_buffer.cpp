#include "algorithms/flat_buffer.h"

#include "backend/device_registry.h"

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

}  // namespace

bool can_pack(c10::DeviceType device) {
  return find_copy_segments(device) != nullptr;
}

void copy_segments(c10::Device device, const std::vector<CopySegment>& segments) {
  CopySegmentsFn fn = find_copy_segments(device.type());
  TORCH_INTERNAL_ASSERT(fn, "fastcomm: no copy kernel for ", device);
  fn(segments.data(), segments.size(), device);
}

at::Tensor pack(const std::vector<at::Tensor>& tensors) {
  TORCH_INTERNAL_ASSERT(!tensors.empty());
  at::Tensor flat = at::empty({total_numel(tensors)}, tensors[0].options());
  copy_segments(flat.device(), concatenated_segments(flat, tensors, /*to_flat=*/true));
  return flat;
}

void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  copy_segments(flat.device(), concatenated_segments(flat, tensors, /*to_flat=*/false));
}

std::vector<CopySegment> rank_major_segments(const at::Tensor& flat, const std::vector<at::Tensor>& tensors,
                                             int64_t world_size, bool to_flat) {
  std::vector<CopySegment> segments;
  auto* base = static_cast<char*>(flat.data_ptr());
  const size_t row_bytes = total_numel(tensors) / world_size * flat.element_size();
  for (int64_t r = 0; r < world_size; ++r) {
    size_t offset = r * row_bytes;
    for (const auto& t : tensors) {
      const size_t chunk = t.numel() / world_size * t.element_size();
      char* chunk_ptr = static_cast<char*>(t.data_ptr()) + r * chunk;
      if (to_flat) {
        segments.push_back({chunk_ptr, base + offset, chunk});
      } else {
        segments.push_back({base + offset, chunk_ptr, chunk});
      }
      offset += chunk;
    }
  }
  return segments;
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
