// Factories of fastcomm's algorithms, and the order the backend registers them in.
#pragma once

#include <cstdint>
#include <memory>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "algorithms/algorithm.h"
#include "algorithms/call_check.h"
#include "algorithms/shm_common.h"

namespace fastcomm {

namespace shm {
class Arena;
class P2pChannels;
}  // namespace shm

// The low-precision all_reduce (Collective::wire): on one host through the
// segment, elsewhere compressed around an ordinary all_reduce. Registered first.
// async_min_bytes: Config::shm_async_min_bytes (from this many tensor bytes on, the engine's op queue runs it).
std::unique_ptr<Algorithm> make_allreduce_low_precision_shm(ShmTopology topology, int64_t async_min_bytes);
// The same on an arena tensor of at least min_bytes: peers' tensors read and written in place.
std::unique_ptr<Algorithm> make_allreduce_low_precision_shm_arena(ShmTopology topology,
                                                                  std::shared_ptr<shm::Arena> arena, int64_t min_bytes,
                                                                  int64_t async_min_bytes);
// The same on an ordinary tensor of at least min_bytes (0: off; single copy's
// minimum): peers' tensors read and written by cross-memory attach.
// huge_pages_min_bytes: Config::shm_huge_pages_min_bytes (transport/shm/huge_pages.h).
std::unique_ptr<Algorithm> make_allreduce_low_precision_shm_single_copy(ShmTopology topology, int64_t min_bytes,
                                                                        int64_t huge_pages_min_bytes,
                                                                        int64_t async_min_bytes);
std::unique_ptr<Algorithm> make_allreduce_low_precision_via_compress();
std::unique_ptr<Algorithm> make_contiguous_staging();
// After contiguous_staging: inputs that overlap outputs (other than the in-place forms) copied first.
std::unique_ptr<Algorithm> make_alias_staging(int rank);
std::unique_ptr<Algorithm> make_coalesced_via_flat_buffer(int world_size);
std::unique_ptr<Algorithm> make_alltoall_list_via_single();
std::unique_ptr<Algorithm> make_avg_via_sum(int rank, int world_size);
std::unique_ptr<Algorithm> make_int16_via_int32();
std::unique_ptr<Algorithm> make_reinterpret_dtype();
// max_bytes: the largest tensor it takes (0: none); the all_gather runs on
// `gloo` once `check` compared the call (groups of 2 or more ranks only).
std::unique_ptr<Algorithm> make_allreduce_via_allgather(int world_size, int64_t max_bytes,
                                                        c10::intrusive_ptr<c10d::Backend> gloo,
                                                        std::shared_ptr<CallCheck> check);

// Shared memory among the ranks of one host (registered when the whole group is on one host).
// all_gather / reduce_scatter_tensor of inputs in the arena, read in place (shm_arena_common.h).
std::unique_ptr<Algorithm> make_allgather_shm_arena(ShmTopology topology, std::shared_ptr<shm::Arena> arena);
std::unique_ptr<Algorithm> make_reduce_scatter_shm_arena(ShmTopology topology, std::shared_ptr<shm::Arena> arena);
// all_reduce of tensors in the ranks' arenas (allocateTensor) of at least min_bytes, read in place.
std::unique_ptr<Algorithm> make_allreduce_shm_arena(ShmTopology topology, std::shared_ptr<shm::Arena> arena,
                                                    int64_t min_bytes, int64_t async_min_bytes);
// max_bytes: the largest all_reduce the one-shot algorithm takes; larger ones run two-shot.
std::unique_ptr<Algorithm> make_allreduce_shm_oneshot(ShmTopology topology, int64_t max_bytes);
// all_reduce of an ordinary tensor (not in `arena`) of [min_bytes, max_bytes]
// (min 0: off): peers' slices read, and results written, in one copy each
// (process_vm_readv / process_vm_writev); huge_pages_min_bytes as above.
std::unique_ptr<Algorithm> make_allreduce_shm_single_copy(ShmTopology topology, std::shared_ptr<shm::Arena> arena,
                                                          int64_t min_bytes, int64_t max_bytes,
                                                          int64_t huge_pages_min_bytes, int64_t async_min_bytes);
std::unique_ptr<Algorithm> make_allreduce_shm_twoshot(ShmTopology topology, int64_t async_min_bytes);
std::unique_ptr<Algorithm> make_broadcast_shm(ShmTopology topology);
std::unique_ptr<Algorithm> make_reduce_shm(ShmTopology topology);
std::unique_ptr<Algorithm> make_allgather_shm(ShmTopology topology);
std::unique_ptr<Algorithm> make_reduce_scatter_shm(ShmTopology topology);
std::unique_ptr<Algorithm> make_alltoall_shm(ShmTopology topology);
std::unique_ptr<Algorithm> make_barrier_shm(ShmTopology topology);
// send/recv through the host's per-pair channels (the group on one host).
std::unique_ptr<Algorithm> make_p2p_shm(ShmTopology topology, std::shared_ptr<shm::P2pChannels> channels);
// Several hosts: shared memory inside each, `leaders` (Gloo, one rank per host) between them.
// max_piece: Config::pipeline_piece_bytes (the pipelined ones).
std::unique_ptr<Algorithm> make_allreduce_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders,
                                                       int64_t max_piece);
std::unique_ptr<Algorithm> make_broadcast_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders);
std::unique_ptr<Algorithm> make_allgather_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders,
                                                       int64_t max_piece);
std::unique_ptr<Algorithm> make_reduce_scatter_hierarchical(ShmTopology topology,
                                                            c10::intrusive_ptr<c10d::Backend> leaders,
                                                            int64_t max_piece);
std::unique_ptr<Algorithm> make_reduce_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders,
                                                    int64_t max_piece);
std::unique_ptr<Algorithm> make_gather_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders,
                                                    int64_t max_piece);
std::unique_ptr<Algorithm> make_scatter_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders,
                                                     int64_t max_piece);
std::unique_ptr<Algorithm> make_alltoall_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders);
std::unique_ptr<Algorithm> make_barrier_hierarchical(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders);

}  // namespace fastcomm
