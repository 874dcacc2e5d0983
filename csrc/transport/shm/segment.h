// A POSIX shared-memory segment laid out as layout.h says, mapped by every rank
// of one host.
//
// Lifetime contract: the creator makes it under an unguessable name with mode
// 0600 (O_EXCL: never an existing file), publishes name and nonce through the
// store, and unlinks the name as soon as every local rank has attached (the
// rendezvous in fastcomm/_shm.py). From then on nothing is left in /dev/shm,
// whatever happens to the processes; the memory lives until the last unmap.
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
  // (rounded up to kSlotAlignment). Throws c10::Error naming `op` on failure.
  static std::unique_ptr<Segment> create(int local_size, size_t slot_bytes);
  // Maps the segment `name`, checking that its header (magic, version, sizes,
  // nonce) is the one the creator published. Throws with the reason otherwise.
  static std::unique_ptr<Segment> attach(const std::string& name, int local_size, size_t slot_bytes, uint64_t nonce);
  // Removes the name (idempotent: a missing name is not an error).
  static void unlink(const std::string& name);

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

 private:
  Segment(std::string name, void* base, size_t bytes) : name_(std::move(name)), base_(base), bytes_(bytes) {}

  std::string name_;
  void* base_;
  size_t bytes_;
};

}  // namespace fastcomm::shm
