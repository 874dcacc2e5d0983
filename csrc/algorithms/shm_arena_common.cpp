#include "algorithms/shm_arena_common.h"

#include <cstring>

namespace fastcomm {

std::optional<ArenaTensorRef> find_arena_tensor(const shm::Arena& arena, const void* data, size_t bytes) {
  const auto found = arena.find(data, bytes);
  if (!found) return std::nullopt;
  return ArenaTensorRef{found->first, found->second};
}

std::vector<char*> exchange_arena_tensors(shm::Engine& engine, shm::Arena& arena, const ArenaTensorRef& mine,
                                          char* data, size_t bytes) {
  const int n = engine.local_size(), me = engine.local_rank();
  const uint64_t op = arena.begin_collective();
  engine.start_use();
  std::memcpy(engine.my_slot(), &mine, sizeof(mine));
  engine.open_my_pieces();  // published by this round: peers may claim pieces of my slice after it (all_reduce)
  engine.round();
  std::vector<char*> tensors(n);
  for (int q = 0; q < n; ++q) {
    if (q == me) {
      tensors[q] = data;
      continue;
    }
    ArenaTensorRef theirs;
    std::memcpy(&theirs, engine.slot_of(q), sizeof(theirs));
    if (theirs.offset + bytes > theirs.block.bytes) {
      engine.abort_op(c10::str("local rank ", q, "'s arena tensor does not fit its block"));
    }
    try {
      tensors[q] = arena.peer_block(q, theirs.block, op) + theirs.offset;
    } catch (const c10::Error& e) {
      engine.abort_op(e.what_without_backtrace());
    }
  }
  return tensors;
}

}  // namespace fastcomm
