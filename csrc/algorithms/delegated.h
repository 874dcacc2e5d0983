// delegated: hands the collective, unchanged, to another c10d::Backend.
//
// fastcomm holds one internal Gloo backend for CPU tensors and, when torch has
// NCCL and a GPU, one NCCL backend for CUDA tensors (both built in Python over a
// PrefixStore of this group's store). This is the transport of last resort: it
// accepts every collective on its device, so it is registered last.
// Bytes moved: whatever the delegate's algorithm moves (Gloo: ring/halving-doubling
// over TCP; NCCL: rings/trees over NVLink/IB).
#pragma once

#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "algorithms/algorithm.h"
#include "algorithms/call_check.h"

namespace fastcomm {

// `check`: where the ranks compare each collective before it goes to `backend`
// (call_check.h); null: not compared (the NCCL delegate, one-rank groups).
// Point-to-point is never compared (Gloo matches it by peer and tag).
std::unique_ptr<Algorithm> make_delegated(std::string name, c10::DeviceType device,
                                          c10::intrusive_ptr<c10d::Backend> backend, std::shared_ptr<CallCheck> check);

// Calls `backend`'s method for `c` with c's options (torch's asyncOp from
// c.blocking) and returns its work unchanged: null where the backend returns
// none (NCCL's calls inside a coalescing block).
c10::intrusive_ptr<c10d::Work> call_backend(c10d::Backend& backend, Collective& c);

// Hands `c` to `backend` now: the work's future, completed with c's results
// (none for p2p, whose works are waited directly).
Launched delegate(c10d::Backend& backend, Collective& c);

}  // namespace fastcomm
