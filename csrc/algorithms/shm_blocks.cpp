#include "algorithms/shm_blocks.h"

#include <algorithm>

#include "kernels/cpu/reduce.h"

namespace fastcomm {

void shm_reduce_chunks(shm::Engine& engine, const ShmReduction& r, int to) {
  const int n = engine.local_size();
  const bool receives = to == kEveryRank || engine.local_rank() == to;
  const size_t chunk = engine.slot_bytes() / r.element * r.element;
  std::vector<const void*> slots(n);
  size_t offset = 0;
  do {
    const size_t len = std::min(chunk, r.total - offset);
    engine.start_use();
    copy_bytes(engine.my_slot(), r.data + offset, len);
    engine.round();
    if (receives) {
      for (int q = 0; q < n; ++q) slots[q] = engine.slot_of(q);
      kernels::reduce(r.dtype, r.kind, slots.data(), n, r.data + offset, static_cast<int64_t>(len / r.element));
    }
    offset += len;
  } while (offset < r.total);
}

void shm_broadcast_chunks(shm::Engine& engine, char* data, size_t total, int root) {
  const bool is_root = engine.local_rank() == root;
  size_t offset = 0;
  do {
    const size_t len = std::min(engine.slot_bytes(), total - offset);
    engine.start_use();
    if (is_root) copy_bytes(engine.my_slot(), data + offset, len);
    engine.round();
    if (!is_root) copy_bytes(data + offset, engine.slot_of(root), len);
    offset += len;
  } while (offset < total);
}

void shm_gather_chunks(shm::Engine& engine, const char* data, size_t total, const std::vector<char*>& outputs, int to) {
  const int n = engine.local_size();
  const bool receives = to == kEveryRank || engine.local_rank() == to;
  size_t offset = 0;
  do {
    const size_t len = std::min(engine.slot_bytes(), total - offset);
    engine.start_use();
    copy_bytes(engine.my_slot(), data + offset, len);
    engine.round();
    if (receives) {
      for (int r = 0; r < n; ++r) {
        if (outputs[r] != data) copy_bytes(outputs[r] + offset, engine.slot_of(r), len);
      }
    }
    offset += len;
  } while (offset < total);
}

void shm_scatter_chunks(shm::Engine& engine, const std::vector<const char*>& sources, char* dest, size_t total,
                        size_t element, int from) {
  const int n = engine.local_size(), me = engine.local_rank();
  const size_t chunk = std::max(element, engine.slot_bytes() / n / element * element);
  for_each_chunk(total, chunk, [&](size_t offset, size_t len) {
    engine.start_use();
    if (me == from) {
      for (int q = 0; q < n; ++q) copy_bytes(engine.my_slot() + q * len, sources[q] + offset, len);
    }
    engine.round();
    if (me != from || sources[me] != dest) copy_bytes(dest + offset, engine.slot_of(from) + me * len, len);
  });
}

void shm_pass_chunks(shm::Engine& engine, const char* source, char* dest, size_t total, int from, int to) {
  const int me = engine.local_rank();
  for_each_chunk(total, engine.slot_bytes(), [&](size_t offset, size_t len) {
    engine.start_use();
    if (me == from) copy_bytes(engine.my_slot(), source + offset, len);
    engine.round();
    if (me == to) copy_bytes(dest + offset, engine.slot_of(from), len);
  });
}

}  // namespace fastcomm
