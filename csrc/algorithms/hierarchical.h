// The frames of fastcomm's hierarchical algorithms: inside each host (shared
// memory), among the host leaders (the `leaders` Gloo group: one rank per
// host, its lowest; rank in that group = host index), back inside each host.
//
// In a hierarchical group every rank has an engine: a rank alone on its host
// has a one-rank engine (its rounds return at once), so steps are written once
// for hosts of any size.
//
// run_hierarchical: three steps run one after the other as one engine op.
//   inside_before  on every local rank (shared memory);
//   among_leaders  on the host's leader only, waited for with the call's
//                  timeout. Its local peers meanwhile wait in the first round
//                  of inside_after; if it fails, the op is aborted so they stop
//                  at once with the leader's reason;
//   inside_after   on every local rank (shared memory).
//
// run_pipelined: the message is cut into pieces; per piece k the leader
// starts the leaders' exchange of piece k without waiting for it, so the
// network carries piece k while the host runs the shared-memory steps of
// pieces k+1 (before) and k-1 (after):
//   inside_before(0); start(0);
//   inside_before(1); start(1); wait(0); inside_after(0);
//   ...
//   wait(K-1); inside_after(K-1).
// On a failure the leader aborts the works still in flight and the op.
//
// Both frames first compare the op across hosts: each leader starts a small
// Gloo all_gather of its descriptor (type, dtype, reduce op, group root,
// sizes) before the first shared-memory step and checks it before its first
// network step, so the check overlaps that step. A mismatch raises "ranks
// disagree on the collective across hosts" on every leader, and through the
// aborted op on every rank (unlike a mismatch inside a host, which leaves the
// group usable, this one breaks it: the hosts' engines cannot agree to stop in
// step without another network round trip per op).
#pragma once

#include <functional>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "algorithms/shm_common.h"

namespace fastcomm {

struct HierarchicalSteps {
  std::function<void()> inside_before;  // may be empty
  std::function<void()> among_leaders;  // may be empty (the cross-host check still runs)
  std::function<void()> inside_after;   // may be empty
};

// `leaders`: the leaders' Gloo group on a host's leader, null elsewhere.
Launched run_hierarchical(const ShmTopology& topology, const Collective& c, const shm::OpDescriptor& descriptor,
                          c10d::Backend* leaders, const HierarchicalSteps& steps);

using LeaderWorks = std::vector<c10::intrusive_ptr<c10d::Work>>;

struct PipelinedSteps {
  size_t pieces = 1;                             // at least 1 (empty tensors still run one piece)
  std::function<void(size_t)> inside_before;     // may be empty
  std::function<LeaderWorks(size_t)> start_among_leaders;  // leader only; must not wait
  std::function<void(size_t)> inside_after;      // may be empty
};

Launched run_pipelined(const ShmTopology& topology, const Collective& c, const shm::OpDescriptor& descriptor,
                       c10d::Backend* leaders, const PipelinedSteps& steps);

// The hosts of a hierarchical group, as the algorithms that move per-rank
// blocks see them. "Host order" lists the group's ranks host by host (each
// host's ranks ascending, i.e. in local rank order).
struct HostLayout {
  std::vector<std::vector<int>> ranks_of_host;  // group ranks of host h, ascending
  std::vector<int> host_order;                  // position -> group rank
  std::vector<int> first_of_host;               // host h's first position in host order
  int my_host = 0;

  explicit HostLayout(const ShmTopology& topology);
  int hosts() const {
    return static_cast<int>(ranks_of_host.size());
  }
  int size_of(int h) const {
    return static_cast<int>(ranks_of_host[h].size());
  }
};

// Bytes per block per piece of a pipelined algorithm: `max_piece`
// (Config::pipeline_piece_bytes) of its largest buffer (all_reduce: the
// tensor; all_gather and gather: the output; reduce_scatter and scatter: the
// input), which holds `blocks` blocks (1, or N per-rank blocks) of
// `block_bytes` each, as a multiple of `element`; large enough that a block
// has at most kMaxPipelinePieces pieces. Messages up to one piece run
// unpipelined. Larger pieces cost fewer Gloo ops (a CPU-bound host gains),
// smaller ones keep less in flight on the link (a congested one gains):
// benchmarks/multihost.py measures both. A piece may span several engine rounds.
size_t pipeline_piece_bytes(size_t max_piece, size_t element, size_t block_bytes, int blocks = 1);

// Past this many pieces the Gloo ops' own cost (about a millisecond each on a
// shaped link) outweighs the overlap that pipelining buys: a small
// FASTCOMM_PIPELINE_PIECE_BYTES must not turn one op into thousands.
constexpr size_t kMaxPipelinePieces = 64;

// The Gloo tag of piece k of group rank r's block (n: group size), for the
// algorithms that send one message per block and piece.
inline int piece_tag(size_t k, int n, int r) {
  return static_cast<int>(k) * n + r;
}

// Where the root of a rooted collective sits, as this rank sees it.
struct RootPlacement {
  int root;          // group rank
  int host;          // its host
  bool on_root_host; // this rank shares that host
  int local_root;    // the root's local rank on its host; -1 on other hosts
  bool is_root;      // this rank is the root
};

// Base of the hierarchical algorithms: the group's topology and hosts, the
// leaders' Gloo group (on hosts' leaders) and the piece size of the pipelined
// ones (0 for the others).
class HierarchicalAlgorithm : public ShmAlgorithm {
 public:
  HierarchicalAlgorithm(ShmTopology topology, c10::intrusive_ptr<c10d::Backend> leaders, int64_t max_piece = 0)
      : ShmAlgorithm(std::move(topology)), leaders_(std::move(leaders)), max_piece_(max_piece), hosts_(topology_) {}

 protected:
  // The gate every hierarchical algorithm starts its accepts() with: the group
  // spans hosts and, on a leader, the leaders' group exists.
  bool runs_here() const {
    return topology_.hierarchical() && (!topology_.leads_host() || leaders_);
  }
  RootPlacement place_root(int root) const;
  // gather's and scatter's relay on a leader that is not the root: room for
  // two pieces (one on the wire, one being copied) of the blocks it relays,
  // the other hosts' N-P on the root's host, its own host's P elsewhere
  // (`piece` bytes each); undefined on the other ranks.
  at::Tensor relay_buffer(const RootPlacement& root, size_t piece, const at::TensorOptions& options) const;

  c10::intrusive_ptr<c10d::Backend> leaders_;
  const size_t max_piece_;
  HostLayout hosts_;
};

// Number of pieces of `total` bytes cut into `piece`-byte pieces (at least 1).
inline size_t pieces_of(size_t total, size_t piece) {
  return total == 0 ? 1 : (total + piece - 1) / piece;
}

// A 1-D view of `t`'s bytes [offset, offset + bytes) (both multiples of its element size).
at::Tensor byte_range(const at::Tensor& t, size_t offset, size_t bytes);

// Starts sending `t` to / receiving `t` from leader `peer` with `tag`.
c10::intrusive_ptr<c10d::Work> leaders_send(c10d::Backend& leaders, const at::Tensor& t, int peer, int tag);
c10::intrusive_ptr<c10d::Work> leaders_recv(c10d::Backend& leaders, const at::Tensor& t, int peer, int tag);

}  // namespace fastcomm
