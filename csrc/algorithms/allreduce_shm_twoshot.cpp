// allreduce_shm_twoshot: large all_reduce among the ranks of one host, as a
// reduce-scatter then an all-gather through the segment.
//
// Per chunk of at most one slot (S bytes), split into P slices:
//   write:  each rank copies the P-1 slices it does not own into its slot
//           ((P-1)/P*S written);
//   round 1, reduce: rank r reduces slice r of every slot (its own slice read
//           straight from its tensor) into slice r of its own slot and, block
//           by block while it is in L1, into its tensor (S read, 2S/P written);
//   round 2, gather: each rank copies slice q from rank q's slot into its
//           tensor for every q != r ((P-1)/P*S read and written).
// Chunks alternate between the two buffers (engine.h), so a chunk's copy-in
// never waits for peers still gathering the previous one. Slice r is reduced
// by rank r alone and copied by everyone, so all ranks get the same bits.
// From Config::shm_async_min_bytes on it runs on the engine's op queue
// (shm_common.h): launch returns at once.
#include <cstring>
#include <vector>

#include "algorithms/allreduce_shm_twoshot.h"
#include "algorithms/registry.h"

namespace fastcomm {

void run_allreduce_twoshot(shm::Engine& engine, const ShmReduction& r) {
  const size_t total = r.total, element = r.element;
  const int n = engine.local_size(), me = engine.local_rank();
  const size_t chunk = engine.slot_bytes() / element * element;
  std::vector<const void*> slices(n);
  size_t offset = 0;
  do {
    const size_t len = std::min(chunk, total - offset);
    const int64_t count = static_cast<int64_t>(len / element);
    const size_t mine_begin = slice_begin(count, n, me) * element;
    const size_t mine_end = slice_begin(count, n, me + 1) * element;
    engine.start_use();
    char* my_slot = engine.my_slot();
    copy_bytes(my_slot, r.data + offset, mine_begin);
    copy_bytes(my_slot + mine_end, r.data + offset + mine_end, len - mine_end);
    engine.round();
    for (int q = 0; q < n; ++q) slices[q] = (q == me ? r.data + offset : engine.slot_of(q)) + mine_begin;
    reduce_into_both(r.dtype, r.kind, slices.data(), n, my_slot + mine_begin, r.data + offset + mine_begin,
                     static_cast<int64_t>((mine_end - mine_begin) / element), element);
    engine.round();
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;  // already in the tensor (reduce_into_both)
      const size_t begin = slice_begin(count, n, q) * element, end = slice_begin(count, n, q + 1) * element;
      copy_bytes(r.data + offset + begin, engine.slot_of(q) + begin, end - begin);
    }
    offset += len;
  } while (offset < total);
}

namespace {

class AllreduceShmTwoshot final : public ShmAlgorithm {
 public:
  AllreduceShmTwoshot(ShmTopology topology, int64_t async_min_bytes)
      : ShmAlgorithm(std::move(topology)), async_min_bytes_(async_min_bytes) {}

  const char* name() const override {
    return "allreduce_shm_twoshot";
  }

  bool accepts(const Collective& c) const override {
    return c.type == c10d::OpType::ALLREDUCE && topology_.single_host() && shm_reduces_one_tensor(c);
  }

  Launched launch(Collective& c, Dispatcher&) override {
    shm::Engine& engine = *topology_.engine;
    const ShmReduction r = shm_reduction(c);
    // By value: the body may run after launch returned (the tensor stays alive with the queued collective).
    auto body = [&engine, r]() { run_allreduce_twoshot(engine, r); };
    const shm::OpDescriptor descriptor = shm_describe(protocol(), c, r.total, r.total, -1);
    return shm_run_sized(engine, c, descriptor, std::move(body), async_min_bytes_, r.total);
  }

 private:
  int64_t async_min_bytes_;
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_shm_twoshot(ShmTopology topology, int64_t async_min_bytes) {
  return std::make_unique<AllreduceShmTwoshot>(std::move(topology), async_min_bytes);
}

}  // namespace fastcomm
