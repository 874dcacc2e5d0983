// What the shared-memory algorithms share: the engine of this group's host,
// how a Collective becomes an OpDescriptor, and running to completion. The
// chunked loops themselves are in shm_blocks.h.
//
// Execution contract (an exception to algorithm.h's "launch must not block"):
// most shm algorithms run inside launch(), on the calling thread, and return
// a finished (or failed) Launched (shm_run): ranks on one host
// progress in lock step through the segment, so for small messages a helper
// thread would only add a wake-up. Large all_reduce whose caller does not
// wait at once (DDP's buckets) runs on the engine's op queue instead
// (shm_run_sized, transport/shm/op_queue.h):
// launch returns at once and the future completes on the queue's thread, so
// the caller (DDP's autograd thread) keeps computing. Either way the engine
// runs ops in the order they were issued: shm_run first waits for the queued
// ops. That order is the order c10d requires anyway.
#pragma once

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "algorithms/algorithm.h"
#include "core/support.h"
#include "transport/shm/engine.h"

namespace fastcomm {

// The shared-memory view of one process group.
struct ShmTopology {
  std::shared_ptr<shm::Engine> engine;  // null: this rank has no local peers, or the engine is off
  int group_size = 1;
  int group_rank = 0;
  // Config::host_of_rank: filled when the group runs hierarchical, else
  // empty. A host's leader is its lowest rank, and its rank in the leaders'
  // group is the host index.
  std::vector<int> host_of_rank;
  // Hierarchical groups: a store (a prefix of the group's) where each host's
  // leader posts why its op failed, under "host/<index>", so leaders of other
  // hosts can quote it (hierarchical.h); null otherwise.
  c10::intrusive_ptr<c10d::Store> failures;
  // True when every rank of the group is on one host and has the engine.
  bool single_host() const {
    return engine && engine->local_size() == group_size;
  }
  // True when the group spans several hosts and every rank has its host's
  // engine (a rank alone on its host a one-rank one): the hierarchical
  // algorithms' topology.
  bool hierarchical() const {
    return engine && group_size > 1 && static_cast<int>(host_of_rank.size()) == group_size && !single_host();
  }
  // This rank leads its host (its lowest rank; a rank alone on its host leads it).
  bool leads_host() const {
    return !engine || engine->local_rank() == 0;
  }
  // The local rank of group rank `r` on its host (hierarchical only).
  int local_rank_of(int r) const;
};

// Base of the shared-memory algorithms: holds the group's topology.
class ShmAlgorithm : public Algorithm {
 public:
  explicit ShmAlgorithm(ShmTopology topology) : topology_(std::move(topology)) {}

 protected:
  // This algorithm's OpDescriptor::algorithm (shm::protocol_code of its name), worked out once.
  uint16_t protocol() const {
    int32_t code = protocol_.load(std::memory_order_relaxed);
    if (code < 0) {
      code = shm::protocol_code(name());
      protocol_.store(code, std::memory_order_relaxed);
    }
    return static_cast<uint16_t>(code);
  }

  ShmTopology topology_;

 private:
  mutable std::atomic<int32_t> protocol_{-1};  // -1: not worked out yet
};

// True for a CPU collective whose tensors are all contiguous (contiguous_staging ran before).
bool shm_eligible(const Collective& c);

// True for a shm-eligible collective with one tensor in `inputs` whose reduce
// op the CPU kernels compute on its dtype (core/support.h): the gate of the
// in-place reductions (all_reduce, reduce), besides their type and topology.
bool shm_reduces_one_tensor(const Collective& c);

// That one tensor, as the reduction building blocks take it.
struct ShmReduction {
  char* data;
  c10::ScalarType dtype;
  ReduceKind kind;
  size_t total;    // bytes
  size_t element;  // bytes per element
};
ShmReduction shm_reduction(const Collective& c);

// The descriptor peers compare: `algorithm` is the running algorithm's
// ShmAlgorithm::protocol(), `root` a local rank or -1.
shm::OpDescriptor shm_describe(uint16_t algorithm, const Collective& c, int64_t input_bytes, int64_t output_bytes,
                               int root);

// An OpDescriptor as int64 fields, for the exchanges that compare calls
// through Gloo (call_check.h, hierarchical.h): type, dtype, reduce op, root,
// algorithm, input bytes, output bytes. op_index is not carried.
constexpr int kDescriptorFields = 7;
void descriptor_to_fields(const shm::OpDescriptor& d, int64_t* fields);
shm::OpDescriptor descriptor_from_fields(const int64_t* fields);

// Runs `body` as one engine op for `c` and returns it finished: succeeded, or
// failed with what body threw (no future: algorithm.h's future_of). The
// engine's waits end c.timeout + `grace` after the op began.
Launched shm_run(shm::Engine& engine, const Collective& c, const shm::OpDescriptor& descriptor,
                 const std::function<void()>& body, std::chrono::milliseconds grace = std::chrono::milliseconds(0));

// As shm_run, except that an op of at least `async_min_bytes` tensor bytes
// (Config::shm_async_min_bytes; 0: never) runs on the engine's op queue:
// launch returns at once and the future completes (or fails) on the queue's
// thread. So `body` must own what it uses (capture by value: it may run after
// launch returned). It runs inline on the queue's own thread (a collective
// issued by a callback of a queued one) and for a blocking call (c.blocking).
Launched shm_run_sized(shm::Engine& engine, const Collective& c, const shm::OpDescriptor& descriptor,
                       std::function<void()> body, int64_t async_min_bytes, size_t bytes);

// all_to_all_single's blocks: the byte offset and length of each of the `n`
// ranks' blocks along dim 0 of `t` (`splits`: rows per rank; empty: even).
void alltoall_blocks(const at::Tensor& t, const std::vector<int64_t>& splits, int n, std::vector<uint64_t>& offsets,
                     std::vector<uint64_t>& lengths);

// Splits `count` elements into `parts` near-equal contiguous slices; slice i is
// [slice_begin(i), slice_begin(i + 1)).
inline int64_t slice_begin(int64_t count, int parts, int i) {
  const int64_t per = (count + parts - 1) / parts;
  return std::min<int64_t>(count, per * i);
}

// Work sharing (shm::Engine::claim_piece) over `count` elements in the slices
// of slice_begin, one per local rank: calls piece(at, len) for every piece
// (at most `per_piece` elements, within one slice) that this rank claims,
// those of its own slice first, then whatever its peers have not claimed of
// theirs, so a rank that runs late has its share finished by the others.
// Every rank passes the same count and per_piece, after a round that followed
// its open_my_pieces(). Each piece goes to exactly one rank.
template <typename Piece>
void for_each_claimed_piece(shm::Engine& engine, int64_t count, int64_t per_piece, Piece&& piece) {
  const int n = engine.local_size(), me = engine.local_rank();
  for (int k = 0; k < n; ++k) {
    const int owner = (me + k) % n;
    const int64_t begin = slice_begin(count, n, owner), end = slice_begin(count, n, owner + 1);
    const int64_t pieces = (end - begin + per_piece - 1) / per_piece;
    for (int64_t claimed; (claimed = engine.claim_piece(owner, pieces)) >= 0;) {
      const int64_t at = begin + claimed * per_piece;
      piece(at, std::min(per_piece, end - at));
    }
  }
}

// A round in a use of its own that writes nothing: it returns once every local
// rank got this far (a barrier; the last round of an op whose peers read this
// rank's memory, so it may return and let its caller write it). A use of its
// own because a use spans at most two rounds (engine.h).
inline void shm_empty_round(shm::Engine& engine) {
  engine.start_use();
  engine.round();
}

// memcpy that accepts empty copies from/to the null data pointer of an empty tensor.
inline void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

// kernels::reduce of `n` sources into `dst` that also leaves the result in
// `copy` (e.g. a slot peers read and this rank's tensor): block by block, each
// block copied while it is still in L1, which saves the later pass that would
// read `dst` back. `copy` may alias a source (a block is copied after it was
// reduced); `dst` may too, as for kernels::reduce.
void reduce_into_both(c10::ScalarType dtype, ReduceKind kind, const void* const* srcs, int n, void* dst, void* copy,
                      int64_t count, size_t element);

inline char* byte_ptr(const at::Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

}  // namespace fastcomm
