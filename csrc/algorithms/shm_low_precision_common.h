// What the shared-memory low-precision all_reduce algorithms share
// (allreduce_low_precision_shm{,_single_copy,_arena}.cpp): the op as their
// launches take it from the collective, the descriptor peers compare, and the
// exchange that gives each rank the clamps of its own values where other
// ranks converted them.
#pragma once

#include <vector>

#include "algorithms/shm_common.h"

namespace fastcomm {

// The one tensor of a low-precision all_reduce (Collective::wire set) and
// its wire. Copyable into a queued op's body (the tensor stays alive with the
// queued collective).
struct LowPrecisionOp {
  LowPrecisionWire wire;
  c10::ScalarType dtype;  // the tensor's
  char* data;
  int64_t count;  // elements
  size_t bytes;
};
LowPrecisionOp low_precision_op(const Collective& c);

// The descriptor peers compare: the wire dtype, not the tensor's (a plain
// all_reduce of the same tensor on another rank is a mismatch, not a silent
// mix); `algorithm` and `root` as shm_describe's (shm::kRootArena for arena tensors).
shm::OpDescriptor low_precision_describe(uint16_t algorithm, const Collective& c, const LowPrecisionOp& op, int root);

// Adds this rank's clamps to the wire's counter, if it has one: once the op succeeded.
void add_clamps(const LowPrecisionWire& wire, int64_t clamped);

// Whether exchange_clamp_counts fits: one int64 per local rank at `offset` of a slot.
bool clamp_counts_fit(const shm::Engine& engine, size_t offset);

// The last round of an op whose ranks each converted a slice of every rank's
// values: `counted[q]` is how many of rank q's values this rank clamped. It
// writes them at `offset` of this rank's slot in the current use, rounds, and
// returns how many of this rank's own values every rank clamped together.
int64_t exchange_clamp_counts(shm::Engine& engine, const std::vector<int64_t>& counted, size_t offset);

}  // namespace fastcomm
