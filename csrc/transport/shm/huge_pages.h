// A rank's own large tensors in transparent huge pages, for the peers that
// read and write them with cross-memory attach (cross_memory.h).
//
// process_vm_readv/writev pin every page of the other process's buffer on
// every call (the kernel walks its page table). With the 4 KiB pages torch's
// CPU allocator gives (it asks for huge pages only with THP_MEM_ALLOC_ENABLE=1)
// that walk is a good part of a large single-copy all_reduce, and it differs
// from tensor to tensor (fresh tensors of one size take different times, each
// the same time again). With the whole 2 MiB blocks inside each tensor moved
// into huge pages (madvise MADV_COLLAPSE, Linux 6.1) the kernel pins 512x
// fewer pages. Measured by benchmarks/peers/run.py --libraries fastcomm with
// FASTCOMM_SHM_HUGE_PAGES_MIN_BYTES=0 as the variant (docs/algorithms.md
// "Huge pages for reused tensors").
//
// The move costs a copy of each block (the kernel copies it), so it is done
// for a buffer that comes back, not for a one-off: the second time the
// same buffer (address and length) comes to a single-copy op (all_reduce's,
// or a point-to-point send's), before its address is published (no peer reads
// it meanwhile; a send buffer sent to two peers at once may be read while it
// moves: p2p_channels.cpp says why that is safe). Each buffer is moved at
// most once (a buffer freed and allocated again at the same address keeps the
// pages it gets), at most kMaxCollapsedBuffers in the process's life. Contents
// do not change (the kernel copies them), nor does memory use: only blocks
// wholly inside the tensor move, and the op writes every byte of it anyway.
// Where the kernel refuses (before 6.1, memory that cannot be collapsed, no
// free huge page) the buffer stays as it was, and is not asked again.
//
// Thread-safe (ops of several groups may run at once).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastcomm::shm {

constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kRecentBuffers = 256;          // seen once, waiting for a second time
constexpr size_t kMaxCollapsedBuffers = 1024;   // bounds what the moves can cost in a process's life

// Call with this rank's own buffer of `bytes` at `data` before publishing its
// address; buffers under `min_bytes` are left alone, and all are when it is 0.
// The move happens under a process-wide lock: another group's op that comes
// here meanwhile waits for it (once per buffer).
void collapse_when_reused(const void* data, size_t bytes, size_t min_bytes);

struct HugePageCounts {
  uint64_t collapsed_buffers = 0;  // moved (some or all blocks)
  uint64_t collapsed_bytes = 0;    // bytes of the blocks asked for in those
  uint64_t refused_buffers = 0;    // the kernel said no
};

// Since the process started (tests and introspection).
HugePageCounts huge_page_counts();

}  // namespace fastcomm::shm
