// The one frame of fastcomm's hierarchical algorithms: inside each host, among
// the host leaders, back inside each host.
//
// A hierarchical algorithm supplies three steps; run_hierarchical() runs them
// as one shared-memory op of the host's engine:
//   inside_before  on every local rank (shared memory);
//   among_leaders  on the host's leader only (its lowest rank): a collective
//                  of the `leaders` Gloo group, one rank per host, rank = host
//                  index, waited for with the call's timeout. Its local peers meanwhile wait in the first round of
//                  inside_after; if it fails, the shm op is aborted so they
//                  stop at once with the leader's reason;
//   inside_after   on every local rank (shared memory).
// A rank alone on its host has no engine and runs among_leaders only.
#pragma once

#include <functional>

#include "algorithms/shm_common.h"

namespace fastcomm {

struct HierarchicalSteps {
  std::function<void()> inside_before;  // may be empty
  std::function<void()> among_leaders;
  std::function<void()> inside_after;   // may be empty
};

Launched run_hierarchical(const ShmTopology& topology, const Collective& c, const shm::OpDescriptor& descriptor,
                          const HierarchicalSteps& steps);

}  // namespace fastcomm
