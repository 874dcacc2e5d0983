// Shared-memory building blocks: the chunked loops every shm algorithm is made
// of, written once. Each runs inside an shm_run body (the engine op is begun),
// moves `total` bytes in slot-sized chunks, one or two rounds per chunk, and
// runs at least one round even for empty tensors, so peers still compare
// their descriptors.
//
// Every rank reduces the same slots in local rank order, so results are
// bitwise identical wherever they are computed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "algorithms/shm_common.h"
#include "transport/shm/engine.h"

namespace fastcomm {

// Calls body(offset, len) for consecutive chunks of at most `chunk` bytes
// covering [0, total); once, with len 0, when total is 0 (a round still runs).
template <class Body>
void for_each_chunk(size_t total, size_t chunk, Body&& body) {
  size_t offset = 0;
  do {
    const size_t len = std::min(chunk, total - offset);
    body(offset, len);
    offset += len;
  } while (offset < total);
}

// Who receives the result of a rooted building block.
constexpr int kEveryRank = -1;

// Reduce: per chunk every rank copies its chunk of `r.data` into its slot (S
// bytes written), one round, then `to` (a local rank, or kEveryRank) reduces
// the P slots in rank order into its `r.data` (P*S read). Other ranks' data
// is left unchanged.
void shm_reduce_chunks(shm::Engine& engine, const ShmReduction& r, int to);

// Broadcast: per chunk local rank `root` writes its slot, one round, the
// others copy it out.
void shm_broadcast_chunks(shm::Engine& engine, char* data, size_t total, int root);

// Gather: per chunk every rank writes its chunk of `data` into its slot, one
// round, then `to` (a local rank, or kEveryRank) copies slot r into
// outputs[r] (one pointer per local rank; an output that is `data` itself is
// skipped).
void shm_gather_chunks(shm::Engine& engine, const char* data, size_t total, const std::vector<char*>& outputs, int to);

// Scatter: local rank `from` hands local rank q the `total` bytes at
// sources[q] (sources read on `from` only): per round it writes a chunk of
// every rank's bytes into its slot (slot/P each), and each rank copies its
// chunk into `dest` (`from` too, unless sources[from] is dest).
void shm_scatter_chunks(shm::Engine& engine, const std::vector<const char*>& sources, char* dest, size_t total,
                        size_t element, int from);

// Pass: per chunk local rank `from` writes its slot from `source`, one round,
// local rank `to` copies it into `dest` (the others only take part in the
// rounds). For handing bytes to one rank without touching the others' tensors.
void shm_pass_chunks(shm::Engine& engine, const char* source, char* dest, size_t total, int from, int to);

}  // namespace fastcomm
