#include "algorithms/hierarchical.h"

namespace fastcomm {

Launched run_hierarchical(const ShmTopology& topology, const Collective& c, const shm::OpDescriptor& descriptor,
                          const HierarchicalSteps& steps) {
  if (!topology.engine) {  // alone on its host: the leaders' step is the whole op
    try {
      steps.among_leaders();
    } catch (...) {
      return failed(std::current_exception());
    }
    return completed(c.result_tensors());
  }
  shm::Engine& engine = *topology.engine;
  return shm_run(engine, c, descriptor, [&]() {
    if (steps.inside_before) steps.inside_before();
    if (topology.leads_host()) {
      try {
        steps.among_leaders();
      } catch (const std::exception& e) {
        engine.abort_op(c10::str("the ", c.name, " among host leaders failed: ", e.what()));
      }
    }
    if (steps.inside_after) steps.inside_after();
  });
}

}  // namespace fastcomm
