// Coalescing blocks: torch's _coalescing_manager (through which
// dist.batch_isend_irecv runs where the backend supports coalescing) opens a
// block with startCoalescing(), makes its calls, and closes it with
// endCoalescing(), whose one Work covers them all (coalesced_work.h).
//
// Contract, as ProcessGroupNCCL's:
//  - a block belongs to the thread that opened it; calls from other threads
//    run as if no block were open;
//  - a block holds one device's calls. CUDA point-to-point calls go to NCCL
//    inside NCCL's own block (one ncclGroupStart/End: sends and receives
//    between the same ranks cannot wait for each other) and return no work
//    (None in Python), and so does every CUDA call after the first of them; a
//    call that goes there and that fastcomm would first rewrite (a dtype NCCL
//    lacks) is refused. The other calls (CPU ones, CUDA collectives before
//    any point-to-point call) run as they are made, through fastcomm's
//    adapters where they need them, and also return their own works;
//  - a call that fails inside a block closes the block (NCCL's too), with a
//    warning: torch's manager never closes a block its body raised in, and an
//    open block would capture the thread's later calls. Opening a block while
//    one is open closes the old one the same way.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "core/collective.h"

namespace fastcomm {

class Coalescing {
 public:
  // `nccl`: the group's NCCL backend (null where CUDA cannot run).
  explicit Coalescing(c10::intrusive_ptr<c10d::Backend> nccl) : nccl_(std::move(nccl)) {}

  // A block is open and the calling thread opened it (one atomic load where none is).
  bool is_mine() const {
    return open_.load(std::memory_order_acquire) &&
           owner_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }

  void start();
  // Raises where `c` cannot join the open block; else whether it goes to
  // NCCL's block (call_nccl) rather than run as it is made (add_work).
  // `chosen`: the algorithm the dispatcher would run `c` with.
  bool joins_nccl_block(const Collective& c, const char* chosen);
  // Hands `c` to NCCL inside NCCL's block; NCCL's work for it (null).
  c10::intrusive_ptr<c10d::Work> call_nccl(Collective& c);
  // The work of a call that ran as it was made.
  void add_work(const Collective& c, c10::intrusive_ptr<c10d::Work> work);

  struct Ended {
    c10::intrusive_ptr<c10d::Work> work;        // the block's work
    c10::intrusive_ptr<c10d::Work> nccl_block;  // NCCL's work for its block, where it held a CUDA collective
  };
  Ended end(int rank);
  // Closes the open block after a call in it failed with `why`.
  void abandon(const char* why);

 private:
  struct Block {
    std::optional<c10::DeviceType> device;  // of its first call
    bool nccl_open = false;                 // NCCL's own block started (first CUDA call)
    bool cuda_collectives = false;          // a CUDA collective (not p2p) joined it
    std::vector<c10::intrusive_ptr<c10d::Work>> works;  // add_work's, in call order
  };
  // Takes the open block (none open afterwards); the caller holds mutex_.
  Block take_locked();
  // Ends NCCL's block of an abandoned block, warning with `why`.
  void close_abandoned(Block& block, const char* why);

  const c10::intrusive_ptr<c10d::Backend> nccl_;
  std::atomic<bool> open_{false};
  std::atomic<std::thread::id> owner_{};
  std::mutex mutex_;  // guards block_
  Block block_;
};

}  // namespace fastcomm
