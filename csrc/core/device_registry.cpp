#include "core/device_registry.h"

#include <map>

namespace fastcomm {

namespace {

std::map<c10::DeviceType, CopySegmentsFn>& copy_segments_table() {
  static std::map<c10::DeviceType, CopySegmentsFn> table;
  return table;
}

}  // namespace

void register_copy_segments(c10::DeviceType type, CopySegmentsFn fn) {
  copy_segments_table()[type] = fn;
}

CopySegmentsFn find_copy_segments(c10::DeviceType type) {
  auto& table = copy_segments_table();
  auto it = table.find(type);
  return it == table.end() ? nullptr : it->second;
}

bool cuda_kernels_compiled() {
  return find_copy_segments(c10::DeviceType::CUDA) != nullptr;
}

}  // namespace fastcomm
