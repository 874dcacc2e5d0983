// Factories of fastcomm's algorithms, and the order the backend registers them in.
#pragma once

#include <cstdint>
#include <memory>

#include "algorithms/algorithm.h"

namespace fastcomm {

std::unique_ptr<Algorithm> make_contiguous_staging();
std::unique_ptr<Algorithm> make_coalesced_via_flat_buffer(int world_size);
std::unique_ptr<Algorithm> make_alltoall_list_via_single();
std::unique_ptr<Algorithm> make_avg_via_sum(int rank, int world_size);
std::unique_ptr<Algorithm> make_int16_via_int32();
std::unique_ptr<Algorithm> make_reinterpret_dtype();
// max_bytes: the largest tensor it takes (0: none).
std::unique_ptr<Algorithm> make_allreduce_via_allgather(int world_size, int64_t max_bytes);

}  // namespace fastcomm
