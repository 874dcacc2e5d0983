#include "algorithms/dispatcher.h"

#include "core/errors.h"
#include "transport/shm/engine.h"

namespace fastcomm {

void Dispatcher::add(std::unique_ptr<Algorithm> algorithm) {
  shm::protocol_code(algorithm->name());  // so a descriptor mismatch can name a peer's algorithm
  auto registered = std::make_unique<Registered>();
  registered->algorithm = std::move(algorithm);
  algorithms_.push_back(std::move(registered));
}

Dispatcher::Registered& Dispatcher::choose(const Collective& c) const {
  for (const auto& registered : algorithms_) {
    if (registered->algorithm->accepts(c)) return *registered;
  }
  FC_CHECK(false, c.name, "no algorithm for ", c10::DeviceTypeName(c.device), " tensors of dtype ", c.dtype(),
           " (this build or machine lacks the transport for this device)");
}

Launched Dispatcher::launch(Collective& c) {
  Registered& chosen = choose(c);
  chosen.launches.fetch_add(1, std::memory_order_relaxed);
  return chosen.algorithm->launch(c, *this);
}

const char* Dispatcher::chosen_name(const Collective& c) const {
  return choose(c).algorithm->name();
}

std::vector<std::string> Dispatcher::names() const {
  std::vector<std::string> out;
  for (const auto& registered : algorithms_) out.emplace_back(registered->algorithm->name());
  return out;
}

std::map<std::string, int64_t> Dispatcher::counts() const {
  std::map<std::string, int64_t> out;  // the algorithms launched at least once
  for (const auto& registered : algorithms_) {
    const int64_t launches = registered->launches.load(std::memory_order_relaxed);
    if (launches > 0) out[registered->algorithm->name()] += launches;
  }
  return out;
}

}  // namespace fastcomm
