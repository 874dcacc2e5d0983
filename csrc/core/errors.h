// Error helpers: every message names the fastcomm op it comes from.
//
// FC_CHECK(cond, op, ...) throws c10::Error (Python: RuntimeError) with the text
// "fastcomm <op>: <message>". Use it for bad arguments, raised before anything
// is sent so the group stays usable.
#pragma once

#include <c10/util/Exception.h>

#define FC_CHECK(cond, op, ...) TORCH_CHECK((cond), "fastcomm ", (op), ": ", __VA_ARGS__)

// A failure of the communication itself (timeout, dead peer): Python sees
// torch.distributed.DistBackendError, a RuntimeError subclass.
#define FC_THROW_BACKEND_ERROR(op, ...) \
  C10_THROW_ERROR(DistBackendError, c10::str("fastcomm ", (op), ": ", __VA_ARGS__))
