#include "algorithms/dispatcher.h"

#include "core/errors.h"

namespace fastcomm {

void Dispatcher::add(std::unique_ptr<Algorithm> algorithm) {
  algorithms_.push_back(std::move(algorithm));
}

Algorithm& Dispatcher::choose(const Collective& c) const {
  for (const auto& algorithm : algorithms_) {
    if (algorithm->accepts(c)) return *algorithm;
  }
  FC_CHECK(false, c.name, "no algorithm for ", c10::DeviceTypeName(c.device), " tensors of dtype ", c.dtype(),
           " (this build or machine lacks the transport for this device)");
}

Launched Dispatcher::launch(Collective& c) {
  Algorithm& algorithm = choose(c);
  {
    std::lock_guard<std::mutex> lock(counts_mutex_);
    ++counts_[algorithm.name()];
  }
  return algorithm.launch(c, *this);
}

std::vector<std::string> Dispatcher::names() const {
  std::vector<std::string> out;
  for (const auto& algorithm : algorithms_) out.emplace_back(algorithm->name());
  return out;
}

std::map<std::string, int64_t> Dispatcher::counts() const {
  std::lock_guard<std::mutex> lock(counts_mutex_);
  return counts_;
}

}  // namespace fastcomm
