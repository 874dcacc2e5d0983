// The steps the single-copy all_reduces share (allreduce_shm_single_copy.cpp,
// allreduce_low_precision_shm_single_copy.cpp): ranks of one host read their
// peers' ordinary tensors and write into them with Linux cross-memory attach
// (transport/shm/cross_memory.h) instead of copying through the segment.
//
//   exchange (round 1): each rank puts its pid and its tensor's address in
//            its slot (a large tensor that comes back is first moved into
//            huge pages: transport/shm/huge_pages.h); on the group's first op
//            every rank also asks the kernel whether it may read and write
//            every peer, and the answers are published in one more round;
//   reduce_and_distribute: rank r reads slice r of every peer's tensor, one
//            piece at a time, into a private buffer that stays in L2, reduces
//            the pieces with its own (rank order) into its own tensor, and
//            writes the result into every peer's tensor while it is still in
//            L2; then it does the same for the pieces of other slices that
//            their owners have not claimed yet (work sharing, Engine::
//            claim_piece: a preempted or slower rank's share is finished by
//            its peers). Only the rank that claimed a piece reads or writes
//            it in any tensor, so nothing waits for anything in between, and
//            the sums are the same whoever does them (rank order);
//   the caller's last round: nobody returns (and lets its caller touch the
//            tensor) while a peer may still read or write it.
//
// Permission: if any rank was refused, exchange() says so on every rank alike
// and the op runs its algorithm's segment steps instead; later ops are not
// accepted (refused()). A read or write refused later (a peer made itself
// non-dumpable) fails the op with the kernel's reason.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "algorithms/shm_common.h"

namespace fastcomm {

// What each rank puts in its slot in round 1.
struct SingleCopyTensorRef {
  int64_t pid;
  uint64_t address;
  int32_t may_access_peers;  // the permission probe's answer (first op only; written after round 1)
};

// reduce(sources, dst, count): reduce `count` elements of the n sources (rank
// order; the own one is the own tensor) into dst, the own tensor; called once
// per piece.
using SingleCopyReduce = std::function<void(const void* const* sources, void* dst, int64_t count)>;

// What the ops of one algorithm of one group carry from one to the next; held
// by shared_ptr (a queued op may run after its algorithm is gone). One op at a
// time uses it (engine.h).
class SingleCopyState {
 public:
  // `huge_pages_min_bytes`: Config::shm_huge_pages_min_bytes (0: never).
  explicit SingleCopyState(int64_t huge_pages_min_bytes) : huge_pages_min_bytes_(huge_pages_min_bytes) {}

  // True once a rank was refused: the group's later ops go elsewhere.
  bool refused() const {
    return permission_.load(std::memory_order_acquire) == kRefused;
  }

  // Round 1 of a use of its own (and the permission round on the group's
  // first op): every rank's SingleCopyTensorRef, or nothing when a rank was
  // refused, on every rank alike (the caller then runs its fallback steps).
  // `data`: this rank's tensor of `bytes`.
  std::optional<std::vector<SingleCopyTensorRef>> exchange(shm::Engine& engine, char* data, size_t bytes,
                                                           size_t element);

  // Slice `me` of `count` elements of `element` bytes, as above; `data` is
  // this rank's tensor.
  void reduce_and_distribute(shm::Engine& engine, const std::vector<SingleCopyTensorRef>& peers, char* data,
                             size_t element, int64_t count, const SingleCopyReduce& reduce);

 private:
  static constexpr int kUnknown = 0, kGranted = 1, kRefused = 2;
  const int64_t huge_pages_min_bytes_;
  std::atomic<int> permission_{kUnknown};  // changed only inside ops, which every rank runs in the same order
  std::vector<char> pieces_;                // a piece of each peer's slice
};

}  // namespace fastcomm
