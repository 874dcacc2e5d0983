// alltoall_shm: all_to_all_single (even or uneven splits) among the ranks of one host.
//
// Round 0 exchanges every rank's send and receive sizes (2P numbers) and each
// rank checks the whole matrix (rank i sends rank j what j expects from i), so
// a mismatch raises the same error on every rank. Data: each slot is cut into
// P pieces of slot/P bytes; per round every rank copies the next piece of its
// block for rank q into piece q of its slot, then copies piece r of every
// rank's slot into its own output. Rounds: the largest block over all pairs
// divided by the piece size. Bytes per rank: its input written, its output read.
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/shm_common.h"
#include "core/errors.h"

namespace fastcomm {

namespace {

class AlltoallShm final : public ShmAlgorithm {
 public:
  using ShmAlgorithm::ShmAlgorithm;

  const char* name() const override {
    return "alltoall_shm";
  }

  bool accepts(const Collective& c) const override {
    // Each slot holds P pieces of at least 64 bytes.
    return c.type == c10d::OpType::ALLTOALL_BASE && topology_.single_host() && shm_eligible(c) &&
           c.inputs.size() == 1 && c.outputs.size() == 1 &&
           topology_.engine->local_size() * size_t{64} <= topology_.engine->slot_bytes();
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const int n = engine.local_size(), me = engine.local_rank();
    std::vector<uint64_t> send_at(n), send_len(n), recv_at(n), recv_len(n);
    alltoall_blocks(c.inputs[0], c.input_splits, n, send_at, send_len);
    alltoall_blocks(c.outputs[0], c.output_splits, n, recv_at, recv_len);
    // Sizes differ across ranks with uneven splits: round 0 checks them instead.
    const auto descriptor = shm_describe(protocol(), c, 0, 0, -1);
    return shm_run(engine, c, descriptor, [&]() {
      // Round 0: the size matrix. Slot layout: send_len[0..n), recv_len[0..n).
      engine.start_use();
      auto* mine = reinterpret_cast<uint64_t*>(engine.my_slot());
      for (int q = 0; q < n; ++q) {
        mine[q] = send_len[q];
        mine[n + q] = recv_len[q];
      }
      engine.round();
      uint64_t largest = 0;
      for (int i = 0; i < n; ++i) {
        const auto* sizes_i = reinterpret_cast<const uint64_t*>(engine.slot_of(i));
        for (int j = 0; j < n; ++j) {
          const uint64_t sent = sizes_i[j];
          const uint64_t expected = reinterpret_cast<const uint64_t*>(engine.slot_of(j))[n + i];
          FC_CHECK(sent == expected, c.name, "rank ", engine.group_rank_of(i), " sends ", sent, " bytes to rank ",
                   engine.group_rank_of(j), ", which expects ", expected, " bytes from it (split sizes disagree)");
          largest = std::max(largest, sent);
        }
      }
      const char* in = byte_ptr(c.inputs[0]);
      char* out = byte_ptr(c.outputs[0]);
      const uint64_t piece = std::max<uint64_t>(64, engine.slot_bytes() / n / 64 * 64);
      for (uint64_t offset = 0; offset < largest; offset += piece) {
        engine.start_use();
        for (int q = 0; q < n; ++q) {
          if (offset < send_len[q]) {
            copy_bytes(engine.my_slot() + q * piece, in + send_at[q] + offset, std::min(piece, send_len[q] - offset));
          }
        }
        engine.round();
        for (int r = 0; r < n; ++r) {
          if (offset < recv_len[r]) {
            copy_bytes(out + recv_at[r] + offset, engine.slot_of(r) + me * piece,
                       std::min(piece, recv_len[r] - offset));
          }
        }
      }
    });
  }
};

}  // namespace

std::unique_ptr<Algorithm> make_alltoall_shm(ShmTopology topology) {
  return std::make_unique<AlltoallShm>(std::move(topology));
}

}  // namespace fastcomm
