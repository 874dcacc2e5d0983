// Chooses an algorithm per collective: the first registered one that accepts.
//
// Order matters: adapters (rewrites such as avg_via_sum) come before the
// transports that finally move bytes (the delegated Gloo/NCCL backends). The
// dispatcher counts launches per algorithm name so tests and benchmarks can see
// which path ran. Thread-safety: launch() may be called from several threads
// (user thread, completion callbacks); the algorithm list is fixed after setup.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"

namespace fastcomm {

class Dispatcher {
 public:
  void add(std::unique_ptr<Algorithm> algorithm);
  Launched launch(Collective& c);
  // The name of the algorithm launch(c) would run (it raises as launch does
  // where none accepts).
  const char* chosen_name(const Collective& c) const;
  std::vector<std::string> names() const;
  std::map<std::string, int64_t> counts() const;

 private:
  struct Registered {
    std::unique_ptr<Algorithm> algorithm;
    std::atomic<int64_t> launches{0};  // an atomic, not a locked map: launch() is on the ~1 us path
  };
  Registered& choose(const Collective& c) const;

  std::vector<std::unique_ptr<Registered>> algorithms_;
};

}  // namespace fastcomm
