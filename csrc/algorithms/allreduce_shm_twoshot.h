// Two-shot all_reduce's steps (allreduce_shm_twoshot.cpp), for algorithms that
// fall back to them inside an op they began (allreduce_shm_single_copy.cpp).
#pragma once

#include "algorithms/shm_common.h"

namespace fastcomm {

// Reduces `r` in place among the engine's ranks, chunk by chunk through the
// slots; runs inside an engine op (shm_run), every rank with the same sizes.
void run_allreduce_twoshot(shm::Engine& engine, const ShmReduction& r);

}  // namespace fastcomm
