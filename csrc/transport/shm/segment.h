// A shared-memory segment laid out as layout.h says, mapped by every rank of
// one host.
//
// Lifetime contract: the creator makes it as an anonymous memory file
// (memfd_create): it has no name in /dev/shm or anywhere else at any time, so
// nothing can outlive the processes, whichever dies when; the kernel frees
// the memory with the last descriptor or mapping. The creator keeps its
// descriptor open for the segment's life, and publishes through the store the
// path /proc/<pid>/fd/<fd> and a random nonce; local peers open that path
// (the kernel lets only processes that may inspect the creator, i.e. the same
// user, do so), map it and check the header (the rendezvous in
// fastcomm/_shm.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/shm/layout.h"

namespace fastcomm::shm {

class Segment {
 public:
  // Creates and maps a new segment for `local_size` ranks with `slot_bytes` per slot
  // (rounded up to kSlotAlignment). Throws c10::Error with the reason on failure.
  static std::unique_ptr<Segment> create(int local_size, size_t slot_bytes);
  // Maps the segment a creator published as `name` (its /proc/<pid>/fd/<fd>
  // path), checking that its header (magic, version, sizes, nonce) is the one
  // the creator published. Throws with the reason otherwise.
  static std::unique_ptr<Segment> attach(const std::string& name, int local_size, size_t slot_bytes, uint64_t nonce);

  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const std::string& name() const {
    return name_;
  }
  uint64_t nonce() const {
    return header()->nonce;
  }
  int local_size() const {
    return static_cast<int>(header()->local_size);
  }
  size_t slot_bytes() const {
    return header()->slot_bytes;
  }
  SegmentHeader* header() const {
    return static_cast<SegmentHeader*>(base_);
  }
  RankControl* control(int local_rank) const {
    return reinterpret_cast<RankControl*>(static_cast<char*>(base_) + control_offset(local_rank));
  }
  char* slot(int buffer, int local_rank) const {
    return static_cast<char*>(base_) + slot_offset(local_size(), slot_bytes(), buffer, local_rank);
  }
  // The point-to-point channel from local rank `src` to local rank `dst`, and its slot `i`.
  ChannelControl* channel(int src, int dst) const {
    return reinterpret_cast<ChannelControl*>(static_cast<char*>(base_) +
                                             channel_offset(local_size(), slot_bytes(), src, dst));
  }
  char* channel_slot(int src, int dst, int i) const {
    return reinterpret_cast<char*>(channel(src, dst)) + kChannelControlBytes +
           static_cast<size_t>(i) * kChannelSlotBytes;
  }

 private:
  Segment(std::string name, void* base, size_t bytes, int fd)
      : name_(std::move(name)), base_(base), bytes_(bytes), fd_(fd) {}

  std::string name_;  // the path peers open
  void* base_;
  size_t bytes_;
  int fd_;  // the creator's descriptor, open for the segment's life (-1 in peers)
};

}  // namespace fastcomm::shm
