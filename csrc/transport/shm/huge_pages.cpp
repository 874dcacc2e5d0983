#include "transport/shm/huge_pages.h"

#include <sys/mman.h>

#include <deque>
#include <mutex>
#include <set>
#include <utility>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1's value; older headers lack the name (older kernels answer EINVAL)
#endif

namespace fastcomm::shm {

namespace {

using Buffer = std::pair<uintptr_t, size_t>;  // address, length

struct Registry {
  std::mutex mutex;
  std::deque<Buffer> recent;  // seen once, newest last
  std::set<Buffer> asked;     // collapsed or refused: never asked again
  HugePageCounts counts;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: ops may run while the process exits
  return *r;
}

}  // namespace

void collapse_when_reused(const void* data, size_t bytes, size_t min_bytes) {
  if (min_bytes == 0 || bytes < min_bytes) return;
  const auto address = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (address + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const uintptr_t end = (address + bytes) & ~(kHugePageBytes - 1);
  if (end <= first) return;  // no whole block inside
  const Buffer buffer{address, bytes};
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.asked.count(buffer) != 0 || r.asked.size() >= kMaxCollapsedBuffers) return;
  for (auto it = r.recent.begin(); it != r.recent.end(); ++it) {
    if (*it != buffer) continue;
    r.recent.erase(it);
    r.asked.insert(buffer);
    if (::madvise(reinterpret_cast<void*>(first), end - first, MADV_COLLAPSE) == 0) {
      ++r.counts.collapsed_buffers;
      r.counts.collapsed_bytes += end - first;
    } else {
      ++r.counts.refused_buffers;
    }
    return;
  }
  r.recent.push_back(buffer);
  if (r.recent.size() > kRecentBuffers) r.recent.pop_front();
}

HugePageCounts huge_page_counts() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.counts;
}

}  // namespace fastcomm::shm
