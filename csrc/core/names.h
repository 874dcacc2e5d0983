// Display names of c10d's enums, for messages. Torch-light (plain ints), so
// the shared-memory transport, which stores them as int32 in the segment,
// needs no c10d header.
#pragma once

#include <string>

namespace fastcomm {

// "SUM", "AVG", ... for a c10d::ReduceOp::RedOpType value; "UNKNOWN(<n>)" otherwise.
std::string reduce_op_name(int op);
// "ALLREDUCE", "BROADCAST", ... for a c10d::OpType value (c10d's own spelling).
std::string op_type_name(int type);

}  // namespace fastcomm
