// The segment steps of the low-precision all_reduce
// (allreduce_low_precision_shm.cpp), for algorithms that fall back to them
// inside an op they began (allreduce_low_precision_shm_single_copy.cpp).
#pragma once

#include "algorithms/shm_common.h"

namespace fastcomm {

// Reduces `count` elements of `dtype` at `data` in place among the engine's
// ranks as `wire` says, chunk by chunk through the slots; runs inside an
// engine op, every rank with the same sizes. Returns how many of this rank's
// values were clamped (the caller adds them to wire.clamped once it succeeded).
int64_t run_allreduce_low_precision_segment(shm::Engine& engine, const LowPrecisionWire& wire,
                                            c10::ScalarType dtype, char* data, int64_t count);

}  // namespace fastcomm
