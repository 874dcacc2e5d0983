// alltoall_hierarchical: all_to_all_single (even or uneven splits) over several hosts.
//
// Steps (run_hierarchical's frame, hierarchical.h), host h of P ranks:
//   before: round 0: every local rank writes its N send and N receive sizes,
//           every local rank checks the pairs inside the host (as
//           alltoall_shm does); blocks between local ranks go through the
//           slots (P pieces per slot), and the leader collects every local
//           rank's blocks for each other host g into one buffer per host
//           (senders in local order, then receivers in g's order);
//   leaders: to every other host's leader, a header (the P x P_g sizes) and
//           that buffer (Gloo send/recv); from each, its header, checked
//           against what this host's ranks expect (a clear error naming the
//           pair that disagrees), then its buffer;
//   after:  the leader hands each local rank its blocks from the other hosts
//           through its slot (P pieces per slot).
// Network: each block that crosses hosts crosses once, in one message per
// pair of hosts (Gloo's all_to_all: one per pair of ranks).
#include <vector>

#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"
#include "core/errors.h"

namespace fastcomm {

namespace {

class AlltoallHierarchical final : public HierarchicalAlgorithm {
 public:
  using HierarchicalAlgorithm::HierarchicalAlgorithm;

  const char* name() const override {
    return "alltoall_hierarchical";
  }

  bool accepts(const Collective& c) const override {
    if (!runs_here()) return false;
    const size_t slot = topology_.engine->slot_bytes();
    // Round 0 holds 2N sizes; a slot holds P pieces of at least 64 bytes.
    return c.type == c10d::OpType::ALLTOALL_BASE && shm_eligible(c) && c.inputs.size() == 1 && c.outputs.size() == 1 &&
           16 * static_cast<size_t>(topology_.group_size) <= slot &&
           topology_.engine->local_size() * size_t{64} <= slot;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const int n = topology_.group_size, me = hosts_.my_host, p = engine.local_size(), q_me = engine.local_rank();
    const bool leads = topology_.leads_host();
    const std::vector<int>& mine = hosts_.ranks_of_host[me];
    std::vector<uint64_t> send_at(n), send_len(n), recv_at(n), recv_len(n);
    alltoall_blocks(c.inputs[0], c.input_splits, n, send_at, send_len);
    alltoall_blocks(c.outputs[0], c.output_splits, n, recv_at, recv_len);
    const char* in = byte_ptr(c.inputs[0]);
    char* out = byte_ptr(c.outputs[0]);
    const size_t piece = std::max<size_t>(64, engine.slot_bytes() / p / 64 * 64);
    // sizes[q][r]: what local rank q sends to group rank r (r < n) and expects from r (n + r).
    std::vector<std::vector<uint64_t>> sizes(p, std::vector<uint64_t>(2 * n));
    // The leader's buffers per other host (index: host), and their sizes.
    std::vector<at::Tensor> outbound(hosts_.hosts()), inbound(hosts_.hosts());
    auto bytes = [](uint64_t count) {
      return at::empty({static_cast<int64_t>(count)}, at::TensorOptions().dtype(at::kByte));
    };
    auto remote = [&](int r) { return topology_.host_of_rank[r] != me; };

    HierarchicalSteps steps;
    steps.inside_before = [&]() {
      engine.start_use();
      auto* slot = reinterpret_cast<uint64_t*>(engine.my_slot());
      for (int r = 0; r < n; ++r) {
        slot[r] = send_len[r];
        slot[n + r] = recv_len[r];
      }
      engine.round();
      for (int q = 0; q < p; ++q) {
        const auto* theirs = reinterpret_cast<const uint64_t*>(engine.slot_of(q));
        sizes[q].assign(theirs, theirs + 2 * n);
      }
      for (int i = 0; i < p; ++i) {
        for (int j = 0; j < p; ++j) {
          const uint64_t sent = sizes[i][mine[j]], expected = sizes[j][n + mine[i]];
          FC_CHECK(sent == expected, c.name, "rank ", mine[i], " sends ", sent, " bytes to rank ", mine[j],
                   ", which expects ", expected, " bytes from it (split sizes disagree)");
        }
      }
      // Blocks inside the host: piece q of each slot carries the block for local rank q.
      uint64_t largest = 0;
      for (int i = 0; i < p; ++i) {
        for (int j = 0; j < p; ++j) largest = std::max(largest, sizes[i][mine[j]]);
      }
      for (uint64_t offset = 0; offset < largest; offset += piece) {
        engine.start_use();
        for (int q = 0; q < p; ++q) {
          const int r = mine[q];
          if (offset < send_len[r]) {
            copy_bytes(engine.my_slot() + q * piece, in + send_at[r] + offset,
                       std::min<uint64_t>(piece, send_len[r] - offset));
          }
        }
        engine.round();
        for (int q = 0; q < p; ++q) {
          const int r = mine[q];
          if (offset < recv_len[r]) {
            copy_bytes(out + recv_at[r] + offset, engine.slot_of(q) + q_me * piece,
                       std::min<uint64_t>(piece, recv_len[r] - offset));
          }
        }
      }
      // Blocks for other hosts, to the leader: per destination rank, every local rank's block at once.
      if (leads) {
        for (int g = 0; g < hosts_.hosts(); ++g) {
          if (g == me) continue;
          uint64_t total = 0;
          for (int q = 0; q < p; ++q) {
            for (int r : hosts_.ranks_of_host[g]) total += sizes[q][r];
          }
          outbound[g] = bytes(total);
        }
      }
      for (int g = 0; g < hosts_.hosts(); ++g) {
        if (g == me) continue;
        // Layout of outbound[g]: local senders in order, each followed by its blocks for g's ranks in order.
        std::vector<uint64_t> start(p);
        uint64_t at = 0;
        for (int q = 0; q < p; ++q) {
          start[q] = at;
          for (int r : hosts_.ranks_of_host[g]) at += sizes[q][r];
        }
        std::vector<uint64_t> within(p, 0);  // bytes of sender q's blocks for g placed so far
        for (int r : hosts_.ranks_of_host[g]) {
          uint64_t largest_block = 0;  // every local rank knows it: all skip or run the same rounds
          for (int q = 0; q < p; ++q) largest_block = std::max(largest_block, sizes[q][r]);
          for (uint64_t offset = 0; offset < largest_block; offset += engine.slot_bytes()) {
            engine.start_use();
            if (offset < send_len[r]) {
              copy_bytes(engine.my_slot(), in + send_at[r] + offset,
                         std::min<uint64_t>(engine.slot_bytes(), send_len[r] - offset));
            }
            engine.round();
            if (leads) {
              for (int q = 0; q < p; ++q) {
                if (offset < sizes[q][r]) {
                  copy_bytes(byte_ptr(outbound[g]) + start[q] + within[q] + offset, engine.slot_of(q),
                             std::min<uint64_t>(engine.slot_bytes(), sizes[q][r] - offset));
                }
              }
            }
          }
          for (int q = 0; q < p; ++q) within[q] += sizes[q][r];
        }
      }
    };
    steps.among_leaders = [&]() {
      // Headers first: P x P_g sizes this host sends to host g, sender-major.
      std::vector<at::Tensor> headers_out(hosts_.hosts()), headers_in(hosts_.hosts());
      LeaderWorks works;
      for (int g = 0; g < hosts_.hosts(); ++g) {
        if (g == me) continue;
        const auto& theirs = hosts_.ranks_of_host[g];
        headers_out[g] = at::empty({static_cast<int64_t>(p * theirs.size())}, at::kLong);
        headers_in[g] = at::empty({static_cast<int64_t>(p * theirs.size())}, at::kLong);
        auto* h = headers_out[g].data_ptr<int64_t>();
        for (int q = 0; q < p; ++q) {
          for (size_t j = 0; j < theirs.size(); ++j)
            h[q * theirs.size() + j] = static_cast<int64_t>(sizes[q][theirs[j]]);
        }
        works.push_back(leaders_send(*leaders_, headers_out[g], g, 0));
        works.push_back(leaders_recv(*leaders_, headers_in[g], g, 0));
      }
      for (auto& work : works) work->wait(c.timeout);
      works.clear();
      // Data: sent now, waited for after this leader has posted its own receives (a send may
      // complete only once its receiver is posted). Empty buffers are not sent; both sides know.
      for (int g = 0; g < hosts_.hosts(); ++g) {
        if (g != me && outbound[g].numel() > 0) works.push_back(leaders_send(*leaders_, outbound[g], g, 1));
      }
      for (int g = 0; g < hosts_.hosts(); ++g) {
        if (g == me) continue;
        const auto& theirs = hosts_.ranks_of_host[g];
        const auto* h = headers_in[g].data_ptr<int64_t>();  // their sender-major: [s in g][d local]
        uint64_t total = 0;
        for (size_t i = 0; i < theirs.size(); ++i) {
          for (int q = 0; q < p; ++q) {
            const uint64_t sent = static_cast<uint64_t>(h[i * p + q]), expected = sizes[q][n + theirs[i]];
            FC_CHECK(sent == expected, c.name, "rank ", theirs[i], " sends ", sent, " bytes to rank ", mine[q],
                     ", which expects ", expected, " bytes from it (split sizes disagree)");
            total += sent;
          }
        }
        inbound[g] = bytes(total);
        if (total > 0) works.push_back(leaders_recv(*leaders_, inbound[g], g, 1));
      }
      for (auto& work : works) work->wait(c.timeout);
    };
    steps.inside_after = [&]() {
      // Blocks from other hosts: per source rank s, piece q of the leader's slot carries s's block for local rank q.
      std::vector<uint64_t> read(hosts_.hosts(), 0);  // bytes of inbound[g] consumed so far
      for (int s : hosts_.host_order) {
        const int g = topology_.host_of_rank[s];
        if (!remote(s)) continue;
        uint64_t largest_block = 0;
        for (int q = 0; q < p; ++q) largest_block = std::max(largest_block, sizes[q][n + s]);
        std::vector<uint64_t> at(p);
        uint64_t sum = 0;
        for (int q = 0; q < p; ++q) {
          at[q] = read[g] + sum;
          sum += sizes[q][n + s];
        }
        for (uint64_t offset = 0; offset < largest_block; offset += piece) {
          engine.start_use();
          if (leads) {
            for (int q = 0; q < p; ++q) {
              if (offset < sizes[q][n + s]) {
                copy_bytes(engine.my_slot() + q * piece, byte_ptr(inbound[g]) + at[q] + offset,
                           std::min<uint64_t>(piece, sizes[q][n + s] - offset));
              }
            }
          }
          engine.round();
          if (offset < recv_len[s]) {
            copy_bytes(out + recv_at[s] + offset, engine.slot_of(0) + q_me * piece,
                       std::min<uint64_t>(piece, recv_len[s] - offset));
          }
        }
        for (int q = 0; q < p; ++q) read[g] += sizes[q][n + s];
      }
    };
    // Sizes differ across ranks with uneven splits: round 0 and the headers check them instead.
    return run_hierarchical(topology_, c, shm_describe(protocol(), c, 0, 0, -1), leaders_.get(), steps);
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_alltoall_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders) {
  return std::make_unique<AlltoallHierarchical>(std::move(topology), std::move(leaders));
}

}  // namespace fastcomm
