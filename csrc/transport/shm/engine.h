// Engine: the rounds protocol every shared-memory algorithm runs on.
//
// An op is a sequence of *uses* of the data buffers, each spanning one or two
// *rounds*. In a round every local rank writes into its own slot of the current
// buffer (or writes nothing), then `round()` publishes that (posted = round
// count, release) and waits until every local rank has published the same
// round; after it, any rank may read any slot of that buffer.
//
// Why two buffers suffice with one wait per round: uses alternate between the
// buffers, and a use spans at most two rounds. Before a rank writes buffer b
// for use u+2 it has seen every peer post the round after use u ended, so every
// peer has finished reading buffer b. Algorithms call start_use() once per
// chunk and round() once or twice after it; round() enforces the two-round cap.
//
// The first use of an op also carries the rank's OpDescriptor; after the first
// round every rank compares all descriptors, so a size/dtype/op mismatch raises
// the same error on every rank instead of corrupting memory (Gloo aborts the
// process there). Waiting spins briefly (not at all while a rank it waits for
// last ran on this CPU: spinning would only delay it), then yields (on the
// caller's thread for as long as the recent waits suggest: spin_budget.h),
// then sleeps on a futex in the segment (posters wake sleepers), so oversubscribed
// hosts keep working; in a bound process, a waiter about to sleep first moves
// a peer that a busy process preempted onto its own CPU (peer_pulling.h), and
// ranks that outnumber their CPUs return to their home CPUs at an op's start
// while the host is quiet (home_keeping.h);
// while sleeping it checks the deadline (the op's timeout), the segment's
// failure flag (with the first failure's reason, quoted by the others),
// whether a missing peer left the group (leave()) and whether peer processes
// still exist.
//
// Thread-safety: one op at a time (op_mutex()); ops run on the calling thread
// or on the engine's op queue (queue(), op_queue.h), in the order collectives
// are issued (algorithms/shm_common.h).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/shm/home_keeping.h"
#include "transport/shm/op_queue.h"
#include "transport/shm/peer_pulling.h"
#include "transport/shm/segment.h"
#include "transport/shm/spin_budget.h"

namespace fastcomm::shm {

// "ALLREDUCE of Float (input 16 B, output 16 B, SUM, by allreduce_shm_oneshot)":
// for errors (op_index not included).
std::string describe(const OpDescriptor& d);

// OpDescriptor::algorithm of the algorithm named `name`: a 16-bit hash of the
// name, the same in every process of one build (tests check that the
// registered names' codes differ). Remembers the name for describe().
uint16_t protocol_code(const char* name);

class Engine {
 public:
  // `group_ranks[i]`: the process-group rank of local rank i (for messages).
  // `spin`: whether waiting may spin (false when ranks outnumber cores; those
  // spin only while home keeping finds the host quiet, home_keeping.h).
  // `check_pids`: whether peers' pids are visible here (same pid namespace).
  Engine(std::unique_ptr<Segment> segment, int local_rank, std::vector<int> group_ranks, bool spin, bool check_pids);

  int local_rank() const {
    return local_rank_;
  }
  int local_size() const {
    return local_size_;
  }
  size_t slot_bytes() const {
    return slot_bytes_;
  }
  const std::string& segment_name() const {
    return segment_->name();
  }
  uint64_t nonce() const {
    return segment_->nonce();
  }
  int group_rank_of(int local_rank) const {
    return group_ranks_[local_rank];
  }
  // The segment (the p2p channels live in it too), and how waiting behaves.
  const Segment& segment() const {
    return *segment_;
  }
  bool spins() const {
    return spin_iterations_ > 0;
  }
  bool checks_pids() const {
    return check_pids_;
  }

  // Starts an op named `op` (for messages) that must finish within `timeout`
  // of `issued` (when it was called: an op that waited on the op queue has
  // less left). Throws DistBackendError if an earlier op failed in a way that
  // left the ranks out of step (timeout, dead peer).
  void begin(const char* op, OpDescriptor descriptor, std::chrono::milliseconds timeout,
             std::chrono::steady_clock::time_point issued = std::chrono::steady_clock::now());
  // Counts a call this rank refused on its own before it reached the engine
  // (a bad argument on this rank only): its peers are waiting in that call, so
  // this rank's next op must disagree with it (by op_index) instead of pairing
  // with it. Runs after the ops queued before it.
  void skip_op();
  // After the op (finished or failed), on the thread that ran it: a thread a
  // peer moved onto its CPU during the op takes its own CPU set back now, not
  // only at its next op (peer_pulling.h). Never throws.
  void end() {
    pulling_.end_op();
  }
  // Moves to the other buffer for the next chunk; the first call of an op also
  // writes its descriptor.
  void start_use();
  // This rank's slot, and local rank r's slot, in the current buffer.
  char* my_slot() const {
    return segment_->slot(buffer_, local_rank_);
  }
  char* slot_of(int r) const {
    return segment_->slot(buffer_, r);
  }
  // Publishes this rank's writes to the current buffer and waits for every
  // local rank's. Throws DistBackendError on timeout, dead peer or a peer's
  // failure, c10::Error on a descriptor mismatch (first round of an op).
  void round();

  // Work sharing inside an op (the all_reduces that read the peers' tensors in
  // place: single copy and the arena's; algorithms/shm_common.h): local rank r's
  // share of the op is a run of pieces that any local rank may take, r first
  // and the others once their own share is done, so a rank that runs late
  // (preempted, or its tensor's pages slower to reach) gets help instead of
  // making every peer wait. open_my_pieces() before a round of the op (the
  // round publishes it); after that round claim_piece(r, pieces) returns the
  // index of a piece of r's share that nobody has claimed, or -1 once all
  // `pieces` are. Every rank must pass the same `pieces` for a share.
  void open_my_pieces();
  int64_t claim_piece(int owner, int64_t pieces);
  // Pieces of other ranks' shares this rank did so far (tests and introspection).
  uint64_t pieces_taken_over() const {
    return pieces_taken_over_;
  }

  // Fails the current op on this rank and tells the local peers (they stop
  // waiting and fail too); the engine is unusable afterwards. For failures
  // outside the rounds, e.g. of the leaders' transport in a hierarchical op.
  [[noreturn]] void abort_op(const std::string& why) {
    fail(why);
  }

  // This rank leaves the group (shutdown, abort, destroy_process_group):
  // peers that are waiting, or will wait, for a round it has not posted stop
  // at once with an error naming it, instead of waiting out their timeout.
  void leave();

  // Held for a whole op by whoever runs it: two threads issuing collectives on
  // one group at once take turns instead of interleaving rounds (their order
  // across ranks is still the caller's business; a mismatch raises).
  std::mutex& op_mutex() {
    return op_mutex_;
  }

  // The ops that run off their caller's thread, in issue order (op_queue.h).
  OpQueue& queue() {
    return queue_;
  }

  // Rounds posted so far (tests and introspection).
  uint64_t rounds() const {
    return posted_;
  }
  // Preempted peers this rank moved onto its CPU so far, and whether a peer
  // moved this rank's thread since its latest op began (peer_pulling.h).
  uint64_t pulls() const {
    return pulling_.pulls();
  }
  bool moved_by_peer() const {
    return pulling_.moved_by_peer();
  }
  // Waits (on any thread) that went to sleep so far, and how long the next
  // wait on the caller's thread stays awake before it sleeps (spin_budget.h).
  uint64_t sleeps() const {
    return sleeps_;
  }
  std::chrono::nanoseconds spin_budget() const {
    return spin_budget_.next();
  }
  // Whether waits on the caller's thread follow the spin budget (the default);
  // off, they keep the op queue's short stage (Config: FASTCOMM_SHM_SPIN_BUDGET).
  // Set while no op runs (group set-up); only timing follows from it.
  bool follows_spin_budget() const {
    return follows_spin_budget_;
  }
  void set_follows_spin_budget(bool on) {
    follows_spin_budget_ = on;
  }
  // Times this rank's op thread moved itself back to its home CPU, and the
  // other processes' share of the CPUs when it last looked (home_keeping.h).
  uint64_t home_returns() const {
    return keeping_.returns();
  }
  double foreign_load() const {
    return keeping_.foreign_load();
  }

 private:
  void post();
  bool all_posted(uint64_t target) const;
  // True when a local rank that has not posted `target` last ran on `cpu`.
  bool missing_rank_shares_cpu(uint64_t target, int cpu) const;
  void wait_all(uint64_t target);
  // Spins, then yields until `yield_until` (at least kYieldIterations times);
  // true once every rank posted `target`, false when the waiter should sleep.
  bool wait_awake(uint64_t target, std::chrono::steady_clock::time_point yield_until);
  void sleep_until(uint64_t target);
  void check_health();
  std::string missing_ranks() const;  // local peers that have not posted this rank's current round
  void check_descriptors();
  [[noreturn]] void fail(const std::string& why);

  std::unique_ptr<Segment> segment_;
  SegmentHeader* header_;
  int local_rank_;
  int local_size_;
  size_t slot_bytes_;
  std::vector<int> group_ranks_;
  int spin_iterations_;
  int yield_iterations_;
  bool check_pids_;
  SpinBudget spin_budget_;  // how long waits on the caller's thread stay awake (spin_budget.h)
  bool follows_spin_budget_ = true;
  uint64_t sleeps_ = 0;  // waits that slept

  uint64_t posted_ = 0;     // rounds this rank has posted
  uint64_t pieces_taken_over_ = 0;  // pieces of other ranks' shares this rank claimed
  uint64_t op_index_ = 0;   // ops begun
  int buffer_ = 1;          // current buffer; the first use takes buffer 0
  int rounds_in_use_ = 0;
  bool descriptor_pending_ = false;  // the op's first use has not been written yet
  bool check_pending_ = false;       // the op's descriptors are compared after the next round
  OpDescriptor descriptor_{};
  const char* op_ = "";
  PeerPulling pulling_;  // after segment_, which it reads
  HomeKeeping keeping_;  // likewise
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds timeout_{0};
  std::chrono::steady_clock::time_point next_pid_check_;
  std::string broken_;  // why the engine can no longer be used (empty: usable)
  std::mutex op_mutex_;
  // Last member: destroyed first, it runs the queued ops while the segment is still mapped.
  OpQueue queue_;
};

}  // namespace fastcomm::shm
