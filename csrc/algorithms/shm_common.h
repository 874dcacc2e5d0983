// What the shared-memory algorithms share: the engine of this group's host,
// how a Collective becomes an OpDescriptor, and running to completion.
//
// Execution contract (an exception to algorithm.h's "launch must not block"):
// shm algorithms run inside launch(), on the calling thread, and return an
// already completed (or failed) future. Ranks on one host progress in lock
// step through the segment, so a helper thread would only add a wake-up; the
// order of shm ops on every rank is the order the collectives were issued,
// which is the order c10d requires anyway.
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "algorithms/algorithm.h"
#include "kernels/cpu/reduce.h"
#include "transport/shm/engine.h"

namespace fastcomm {

// The shared-memory view of one process group.
struct ShmTopology {
  std::shared_ptr<shm::Engine> engine;  // null: this rank has no local peers, or the engine is off
  int group_size = 1;
  int group_rank = 0;
  // Host index (0..H-1, hosts ordered by their lowest rank) of every group
  // rank; filled when the group spans hosts (hierarchical), else empty. A
  // host's leader is its lowest rank, and its rank in the leaders' group is
  // the host index.
  std::vector<int> host_of_rank;
  // True when every rank of the group is on one host and has the engine.
  bool single_host() const {
    return engine && engine->local_size() == group_size;
  }
  // The local rank of group rank `r` on its host (hierarchical only).
  int local_rank_of(int r) const;
};

// The reduction kernel for a c10d reduce op, if the kernels implement it for `dtype`.
std::optional<kernels::ReduceKind> shm_reduce_kind(const c10d::ReduceOp& op, at::ScalarType dtype);

// True for a CPU collective whose tensors are all contiguous (contiguous_staging ran before).
bool shm_eligible(const Collective& c);

// The descriptor peers compare; `root` is a local rank or -1.
shm::OpDescriptor shm_describe(const Collective& c, int64_t input_bytes, int64_t output_bytes, int root);

// Runs `body` as one engine op for `c` and returns the finished future:
// completed with c.result_tensors(), or failed with what body threw.
Launched shm_run(shm::Engine& engine, const Collective& c, const shm::OpDescriptor& descriptor,
                 const std::function<void()>& body);

// Inside an shm_run body: copies `total` bytes at `data` from local rank
// `root` to every local rank, one slot-sized chunk per round (the root writes
// its slot, the others copy it out).
void shm_broadcast_chunks(shm::Engine& engine, char* data, size_t total, int root);

// Splits `count` elements into `parts` near-equal contiguous slices; slice i is
// [slice_begin(i), slice_begin(i + 1)).
inline int64_t slice_begin(int64_t count, int parts, int i) {
  const int64_t per = (count + parts - 1) / parts;
  return std::min<int64_t>(count, per * i);
}

// memcpy that accepts empty copies from/to the null data pointer of an empty tensor.
inline void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

inline char* byte_ptr(const at::Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

}  // namespace fastcomm
