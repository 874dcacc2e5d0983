// What the arena collectives share (allreduce_shm_arena, allgather_shm_arena,
// reduce_scatter_shm_arena): their first round, in which every rank says where
// its input lives in its arena (transport/shm/arena.h) and maps the peers'.
// Every rank must pass an arena input: the algorithms describe their ops with
// root = kRootArena, so a rank with an ordinary tensor (another algorithm,
// root -1) makes the op fail on every rank with "ranks disagree" instead of
// mixing protocols.
#pragma once

#include <optional>
#include <vector>

#include "algorithms/shm_common.h"
#include "transport/shm/arena.h"

namespace fastcomm {

// Where a rank's input lives: its block and the offset in it.
struct ArenaTensorRef {
  shm::BlockRef block;
  uint64_t offset;
};

// Where [data, data + bytes) lives in `arena`; none when it is not in one block of it.
std::optional<ArenaTensorRef> find_arena_tensor(const shm::Arena& arena, const void* data, size_t bytes);

// Round 1 of an arena collective: starts a use, writes `mine` into this rank's
// slot, runs the round, and returns where every local rank's input (of `bytes`
// each) can be read (and, by all_reduce, written) here: `data` for this rank,
// each peer's block mapped (cached) at its offset. Fails the op on every rank
// (abort_op) when a peer's input does not fit its block or its block cannot be
// mapped.
std::vector<char*> exchange_arena_tensors(shm::Engine& engine, shm::Arena& arena, const ArenaTensorRef& mine,
                                          char* data, size_t bytes);

}  // namespace fastcomm
