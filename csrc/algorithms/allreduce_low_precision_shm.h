// The segment steps of the low-precision all_reduce
// (allreduce_low_precision_shm.cpp), for algorithms that fall back to them
// inside an op they began (allreduce_low_precision_shm_single_copy.cpp).
#pragma once

#include "algorithms/shm_low_precision_common.h"

namespace fastcomm {

// Reduces `op` in place among the engine's ranks, chunk by chunk through the
// slots; runs inside an engine op, every rank with the same sizes. Returns how
// many of this rank's values were clamped (the caller adds them once it succeeded).
int64_t run_allreduce_low_precision_segment(shm::Engine& engine, const LowPrecisionOp& op);

}  // namespace fastcomm
