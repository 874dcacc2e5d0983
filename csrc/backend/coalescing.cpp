#include "backend/coalescing.h"

#include <cstring>

#include "algorithms/delegated.h"
#include "backend/coalesced_work.h"
#include "core/errors.h"

namespace fastcomm {

Coalescing::Block Coalescing::take_locked() {
  Block taken = std::move(block_);
  block_ = Block{};
  open_.store(false, std::memory_order_release);
  return taken;
}

void Coalescing::close_abandoned(Block& block, const char* why) {
  TORCH_WARN("fastcomm: the open coalescing block is closed (", why, "); the works of its calls are dropped");
  if (!block.nccl_open) return;
  try {
    nccl_->endCoalescing();  // ends NCCL's group: an open one would hold every later CUDA call
  } catch (const std::exception& e) {
    TORCH_WARN("fastcomm: closing NCCL's block of the abandoned coalescing block failed: ", e.what());
  }
}

void Coalescing::start() {
  std::optional<Block> stale;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_.load(std::memory_order_relaxed)) stale = take_locked();
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    open_.store(true, std::memory_order_release);
  }
  if (stale) close_abandoned(*stale, "start_coalescing was called again before end_coalescing");
}

bool Coalescing::joins_nccl_block(const Collective& c, const char* chosen) {
  std::lock_guard<std::mutex> lock(mutex_);
  FC_CHECK(!block_.device || *block_.device == c.device, c.name, "a coalescing block holds one device's calls: this ",
           "call's tensors are on ", c10::DeviceTypeName(c.device), ", the block's first call's on ",
           c10::DeviceTypeName(block_.device.value_or(c.device)));
  const bool to_nccl = c.device == c10::DeviceType::CUDA && (c.is_p2p() || block_.nccl_open);
  FC_CHECK(!to_nccl || std::strcmp(chosen, "nccl") == 0, c.name,
           "inside a coalescing block with point-to-point calls (batch_isend_irecv) CUDA calls go to NCCL as they ",
           "are, and this one needs fastcomm's ", chosen,
           " first: give it contiguous tensors of a dtype NCCL has, or make it outside the block");
  return to_nccl;
}

c10::intrusive_ptr<c10d::Work> Coalescing::call_nccl(Collective& c) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    block_.device = c.device;
    block_.cuda_collectives = block_.cuda_collectives || !c.is_p2p();
    if (!block_.nccl_open) {
      nccl_->startCoalescing();
      block_.nccl_open = true;
    }
  }
  return call_backend(*nccl_, c);
}

void Coalescing::add_work(const Collective& c, c10::intrusive_ptr<c10d::Work> work) {
  std::lock_guard<std::mutex> lock(mutex_);
  block_.device = c.device;
  block_.works.push_back(std::move(work));
}

Coalescing::Ended Coalescing::end(int rank) {
  Block block;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    FC_CHECK(open_.load(std::memory_order_relaxed), "end_coalescing",
             "no coalescing block is open on this group (start_coalescing first, or a call inside the block ",
             "failed and closed it)");
    block = take_locked();
  }
  Ended out;
  std::vector<c10::intrusive_ptr<c10d::Work>> parts = std::move(block.works);
  if (block.nccl_open) {
    c10::intrusive_ptr<c10d::Work> nccl_block = nccl_->endCoalescing();
    if (nccl_block) {
      parts.push_back(nccl_block);
      if (block.cuda_collectives) out.nccl_block = nccl_block;
    }
  }
  out.work = c10::make_intrusive<CoalescedWork>(rank, std::move(parts));
  return out;
}

void Coalescing::abandon(const char* why) {
  Block block;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!open_.load(std::memory_order_relaxed)) return;
    block = take_locked();
  }
  close_abandoned(block, why);
}

}  // namespace fastcomm
