// Argument checks run before anything is sent, so a bad call fails on the
// calling rank with a message naming the op, and the group stays usable.
//
// What cannot be seen locally (a peer passing different sizes) is not checked
// here; the transport reports it.
#pragma once

#include "core/collective.h"

namespace fastcomm {

// Throws c10::Error ("fastcomm <op>: ...") when `c` is malformed for a group of
// `world_size` ranks in which this process is `rank`.
void validate(const Collective& c, int rank, int world_size);

// Throws unless the all_to_all_single split sizes are valid for `t`: empty
// (even split: dim 0 divisible by world_size) or world_size non-negative row
// counts that add up to dim 0. `which` is "input" or "output".
void check_split_sizes(const char* op_name, const char* which, const std::vector<int64_t>& splits, const at::Tensor& t,
                       int world_size);

}  // namespace fastcomm
