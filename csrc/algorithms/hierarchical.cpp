#include "algorithms/hierarchical.h"

#include <algorithm>
#include <stdexcept>

namespace fastcomm {

namespace {

// The leaders' comparison of one op across hosts (see hierarchical.h).
class CrossHostCheck {
 public:
  CrossHostCheck(c10d::Backend* leaders, const Collective& c, const shm::OpDescriptor& descriptor)
      : leaders_(leaders), c_(c), mine_(descriptor) {
    if (!leaders_) return;
    mine_.op_index = 0;  // engines count ops per host
    const bool rooted = c.type == c10d::OpType::BROADCAST || c.type == c10d::OpType::REDUCE ||
                        c.type == c10d::OpType::GATHER || c.type == c10d::OpType::SCATTER;
    // The group root goes into the exchange whole; OpDescriptor's 16-bit root
    // (a local rank in the engine) only names it in the error message.
    const int64_t root = rooted ? c.peer : -1;
    mine_.root = static_cast<int16_t>(root);
    at::Tensor encoded = at::empty({kDescriptorFields}, at::kLong);
    descriptor_to_fields(mine_, encoded.data_ptr<int64_t>());
    encoded.data_ptr<int64_t>()[3] = root;
    inputs_ = {encoded};
    outputs_.resize(1);
    for (int h = 0; h < leaders_->getSize(); ++h) outputs_[0].push_back(at::empty_like(encoded));
    c10d::AllgatherOptions options;
    options.timeout = c.timeout;
    work_ = leaders_->allgather(outputs_, inputs_, options);
  }

  // Waits for the exchange; throws if a host called something else.
  void verify() {
    if (!work_) return;
    work_->wait(c_.timeout);
    work_.reset();
    const at::Tensor& mine = inputs_[0];
    for (int h = 0; h < static_cast<int>(outputs_[0].size()); ++h) {
      if (at::equal(outputs_[0][h], mine)) continue;
      const shm::OpDescriptor theirs = descriptor_from_fields(outputs_[0][h].data_ptr<int64_t>());
      throw std::runtime_error(c10::str("ranks disagree on the collective across hosts: host ", leaders_->getRank(),
                                        "'s ranks called ", shm::describe(mine_), ", host ", h, "'s ranks called ",
                                        shm::describe(theirs)));
    }
  }

 private:
  c10d::Backend* leaders_;
  const Collective& c_;
  shm::OpDescriptor mine_;
  std::vector<at::Tensor> inputs_;
  std::vector<std::vector<at::Tensor>> outputs_;
  c10::intrusive_ptr<c10d::Work> work_;
};

// How much longer than the op's timeout a leader's local peers wait for it:
// the leader enforces the timeout on its network step and then aborts the op
// with the cause (and what other hosts reported), which its peers quote.
constexpr std::chrono::milliseconds kLeaderGrace{1000};

std::chrono::milliseconds grace(const ShmTopology& topology) {
  return topology.leads_host() ? std::chrono::milliseconds(0) : kLeaderGrace;
}

// The first line of an error (c10 errors may append a C++ backtrace).
std::string first_line(const char* what) {
  const std::string text(what);
  return text.substr(0, text.find('\n'));
}

// Posts why this host's op failed where the other hosts' leaders look
// (best effort: the store may be gone too).
void post_failure(const ShmTopology& topology, const char* what) {
  if (!topology.failures || !topology.leads_host()) return;
  const std::string why = first_line(what);
  try {
    topology.failures->set(c10::str("host/", topology.host_of_rank[topology.group_rank]),
                           std::vector<uint8_t>(why.begin(), why.end()));
  } catch (...) {
  }
}

// "; host 1 reported: <why>" for each other host whose leader posted a failure.
std::string reports_of_other_hosts(const ShmTopology& topology) {
  std::string reports;
  if (!topology.failures) return reports;
  const int me = topology.host_of_rank[topology.group_rank];
  const int hosts = *std::max_element(topology.host_of_rank.begin(), topology.host_of_rank.end()) + 1;
  for (int g = 0; g < hosts; ++g) {
    const std::string key = c10::str("host/", g);
    try {
      if (g == me || !topology.failures->check({key})) continue;
      const std::vector<uint8_t> why = topology.failures->get(key);
      reports += c10::str("; host ", g, " reported: ", std::string(why.begin(), why.end()));
    } catch (...) {
    }
  }
  return reports;
}

// The leader's error when its step among the leaders failed, with what other hosts reported.
std::string leaders_failure(const ShmTopology& topology, const Collective& c, const std::exception& e) {
  return c10::str("the ", c.name, " among host leaders failed: ", first_line(e.what()),
                  reports_of_other_hosts(topology));
}

}  // namespace

Launched run_hierarchical(const ShmTopology& topology, const Collective& c, const shm::OpDescriptor& descriptor,
                          c10d::Backend* leaders, const HierarchicalSteps& steps) {
  shm::Engine& engine = *topology.engine;
  return shm_run(
      engine, c, descriptor,
      [&]() {
        try {
          CrossHostCheck check(topology.leads_host() ? leaders : nullptr, c, descriptor);
          if (steps.inside_before) steps.inside_before();
          if (topology.leads_host()) {
            try {
              check.verify();
              if (steps.among_leaders) steps.among_leaders();
            } catch (const std::exception& e) {
              engine.abort_op(leaders_failure(topology, c, e));
            }
          }
          if (steps.inside_after) steps.inside_after();
        } catch (const std::exception& e) {  // whatever stopped this host: the other hosts may quote it
          post_failure(topology, e.what());
          throw;
        }
      },
      grace(topology));
}

namespace {

void abort_all(std::vector<LeaderWorks>& in_flight) {
  for (auto& works : in_flight) {
    for (auto& work : works) {
      try {
        work->abort();
      } catch (...) {  // already finished or failed: nothing to stop
      }
    }
    works.clear();
  }
}

}  // namespace

Launched run_pipelined(const ShmTopology& topology, const Collective& c, const shm::OpDescriptor& descriptor,
                       c10d::Backend* leaders, const PipelinedSteps& steps) {
  shm::Engine& engine = *topology.engine;
  const bool leads = topology.leads_host();
  return shm_run(
      engine, c, descriptor,
      [&]() {
        std::vector<LeaderWorks> in_flight(steps.pieces);
        auto as_leader = [&](const std::function<void()>& step) {
          try {
            step();
          } catch (const std::exception& e) {
            abort_all(in_flight);
            engine.abort_op(leaders_failure(topology, c, e));
          }
        };
        CrossHostCheck check(leads ? leaders : nullptr, c, descriptor);
        try {
          for (size_t k = 0; k <= steps.pieces; ++k) {
            if (k < steps.pieces) {
              if (steps.inside_before) steps.inside_before(k);
              if (leads) {
                as_leader([&]() {
                  if (k == 0) check.verify();
                  in_flight[k] = steps.start_among_leaders(k);
                });
              }
            }
            if (k == 0) continue;
            if (leads) {
              as_leader([&]() {
                for (auto& work : in_flight[k - 1]) work->wait(c.timeout);
                in_flight[k - 1].clear();
              });
            }
            if (steps.inside_after) steps.inside_after(k - 1);
          }
        } catch (const std::exception& e) {  // a round failed (peer, timeout): stop the leader's transfers too
          abort_all(in_flight);
          post_failure(topology, e.what());  // whatever stopped this host: the other hosts may quote it
          throw;
        }
      },
      grace(topology));
}

HostLayout::HostLayout(const ShmTopology& topology) {
  const int hosts = topology.host_of_rank.empty()
                        ? 0
                        : *std::max_element(topology.host_of_rank.begin(), topology.host_of_rank.end()) + 1;
  ranks_of_host.resize(hosts);
  for (int r = 0; r < topology.group_size; ++r) ranks_of_host[topology.host_of_rank[r]].push_back(r);
  for (int h = 0; h < hosts; ++h) {
    first_of_host.push_back(static_cast<int>(host_order.size()));
    host_order.insert(host_order.end(), ranks_of_host[h].begin(), ranks_of_host[h].end());
  }
  my_host = hosts ? topology.host_of_rank[topology.group_rank] : 0;
}

size_t pipeline_piece_bytes(size_t max_piece, size_t element, size_t block_bytes, int blocks) {
  const size_t configured = max_piece / blocks / element * element;
  // ceil(block_bytes / kMaxPipelinePieces), rounded up to a multiple of `element`.
  const size_t at_least = (block_bytes + kMaxPipelinePieces - 1) / kMaxPipelinePieces;
  const size_t fewest = (at_least + element - 1) / element * element;
  return std::max({element, configured, fewest});
}

at::Tensor HierarchicalAlgorithm::relay_buffer(const RootPlacement& root, size_t piece,
                                               const at::TensorOptions& options) const {
  if (!topology_.leads_host() || root.is_root) return at::Tensor();
  const int local_size = topology_.engine->local_size();
  const int blocks = root.on_root_host ? topology_.group_size - local_size : local_size;
  const int64_t element = static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  return at::empty({2, static_cast<int64_t>(blocks * piece) / element}, options);
}

RootPlacement HierarchicalAlgorithm::place_root(int root) const {
  const int host = topology_.host_of_rank[root];
  const bool on_root_host = hosts_.my_host == host;
  return {root, host, on_root_host, on_root_host ? topology_.local_rank_of(root) : -1, topology_.group_rank == root};
}

at::Tensor byte_range(const at::Tensor& t, size_t offset, size_t bytes) {
  const int64_t element = t.element_size();
  return t.view(-1).narrow(0, static_cast<int64_t>(offset) / element, static_cast<int64_t>(bytes) / element);
}

c10::intrusive_ptr<c10d::Work> leaders_send(c10d::Backend& leaders, const at::Tensor& t, int peer, int tag) {
  std::vector<at::Tensor> tensors{t};
  return leaders.send(tensors, peer, tag);
}

c10::intrusive_ptr<c10d::Work> leaders_recv(c10d::Backend& leaders, const at::Tensor& t, int peer, int tag) {
  std::vector<at::Tensor> tensors{t};
  return leaders.recv(tensors, peer, tag);
}

}  // namespace fastcomm
