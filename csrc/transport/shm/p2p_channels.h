// Point-to-point messages between the ranks of one host, through per-pair
// channels in the host's segment (layout.h): send/recv that involve only the
// two ranks (the collectives' rounds wait for every local rank).
//
// Protocol. Channel (src, dst) is a single-producer single-consumer ring of
// kChannelSlots slots. The sender copies a message in chunks of at most
// kChannelPayloadBytes, each with a header (message size, offset, tag), and
// publishes each slot by raising `written` (release); the receiver copies the
// chunk out and raises `consumed` (release), which frees the slot. Messages
// from one sender arrive in the order sent. After changing a counter a rank
// rings the other rank's doorbell (a futex word in its RankControl), so a
// sleeping peer wakes.
//
// Matching, as MPI and Gloo do it: a receive names a source (or any source)
// and a tag; a message matches the oldest posted receive with its source and
// tag, and messages with equal source and tag are received in the order sent.
// A message at the head of a channel that no posted receive wants stays there
// (the ring is the flow control) unless a receive is waiting on that source
// for another tag: then it is copied aside ("unexpected"), so receives may
// take tags in any order.
//
// Single copy. A message of at least `single_copy_bytes` does not go through
// the ring: the sender posts one slot saying where the message lies in its
// memory, the receiver copies it straight into its tensor with
// process_vm_readv (Linux cross-memory attach, as MPICH and Open MPI do) and
// frees the slot, which completes the send (the sender's tensor must not
// change until then). Where the kernel refuses (another user, a non-dumpable
// sender without CAP_SYS_PTRACE, seccomp), the receiver marks the channel
// `single_copy_refused` and the sender sends that message, and every later
// one, through the ring.
//
// Completion. A send through the ring completes once its last chunk is in the
// channel (eager, like Gloo's and MPI's small sends): the caller may reuse the
// tensor, and a ring of blocking sends that fit the channels cannot deadlock;
// a single-copy send completes once the receiver has read it. A receive
// completes once its last chunk is copied out. A size mismatch fails the
// receive and closes the channel; the sender's send fails if it is still in
// flight, else its next message to that rank does, quoting the receiver.
//
// Progress. Any thread that waits for an op (wait(), poll()) moves every
// pending op of this rank, so an isend larger than a channel progresses while
// its rank waits for something else. A progress thread (started with the
// first op) looks every 0.5 ms for ops pending longer than that while no
// thread waits and then moves them, so futures complete and isends drain even
// when the caller never waits (or sits in a collective); after 0.1 s without
// ops it parks until the next post. Waiting spins, yields, then sleeps on the
// doorbell (p2p_channels.cpp says how long and why); passes check the ops'
// deadlines and whether a peer left the group (every 0.2 ms) and whether its
// process still exists (every 0.1 s), and fail the ops with the reason.
//
// Thread-safety: every member may be called from any thread; the pending ops
// and per-channel state are guarded by one mutex, which is never held while a
// completion callback runs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/shm/engine.h"

namespace fastcomm::shm {

// One send or receive, shared by its poster and the channels. The poster
// makes it (a subclass carries whatever must live as long as the op, such as
// the tensor whose memory it moves) and hands it to post(); the channels
// finish it exactly once.
class P2pOp {
 public:
  enum class Kind { kSend, kRecv };

  P2pOp() = default;
  virtual ~P2pOp() = default;
  P2pOp(const P2pOp&) = delete;
  P2pOp& operator=(const P2pOp&) = delete;

  bool finished() const {
    return finished_.load(std::memory_order_acquire);
  }
  // Null, or why the op failed; meaningful once finished().
  std::exception_ptr error() const {
    return finished() ? error_ : nullptr;
  }
  // The local rank the message came from (receives, once finished).
  int source() const {
    return source_;
  }

 protected:
  // Runs once, after finished() turned true, on whichever thread finished the
  // op (a waiter, a poster or the progress thread), without the channels'
  // lock held. A waiter may see finished() and return before it runs.
  virtual void on_finished() {}

 private:
  friend class P2pChannels;

  Kind kind_ = Kind::kSend;
  int peer_ = -1;  // local rank; -1: any source
  int64_t tag_ = 0;
  char* data_ = nullptr;  // the caller's memory; the op's owner keeps it alive
  size_t bytes_ = 0;
  std::chrono::steady_clock::time_point posted_at_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds timeout_{0};
  // Progress, guarded by the channels' mutex.
  size_t moved_bytes_ = 0;
  bool started_ = false;  // send: first chunk written; recv: bound to a message
  int source_ = -1;
  bool awaiting_read_ = false;  // single-copy send: posted, the receiver has not read it yet
  uint64_t read_at_ = 0;        // ... it has once the channel's `consumed` reaches this
  // Completion: error_ is written before finished_ (release).
  std::exception_ptr error_;
  std::atomic<bool> finished_{false};
};

class P2pChannels {
 public:
  // Messages of at least `single_copy_bytes` (0: none) are read by the receiver from the sender's memory;
  // send buffers of those from `huge_pages_min_bytes` (0: none) that come back go into huge pages (huge_pages.h).
  P2pChannels(std::shared_ptr<Engine> engine, size_t single_copy_bytes, size_t huge_pages_min_bytes);
  ~P2pChannels();
  P2pChannels(const P2pChannels&) = delete;
  P2pChannels& operator=(const P2pChannels&) = delete;

  // Posts `op`, a fresh op, as a send to / receive from local rank `peer`
  // (-1: any source, receives only) of `bytes` at `data`, which must stay
  // valid as long as `op` lives (the op should own it). Fails the op when the
  // channel is closed. Starts moving bytes at once.
  void post(const std::shared_ptr<P2pOp>& op, P2pOp::Kind kind, int peer, int64_t tag, void* data, size_t bytes,
            std::chrono::milliseconds timeout);
  // Moves pending ops until `op` finishes or `timeout` (from now) passes, then
  // fails it; rethrows its error.
  void wait(const std::shared_ptr<P2pOp>& op, std::chrono::milliseconds timeout);
  // One pass of progress; true when `op` is finished.
  bool poll(const std::shared_ptr<P2pOp>& op);
  // Fails every pending op with `why` and stops the progress thread
  // (shutdown, abort); later posts fail at once.
  void close(const std::string& why);

  int group_rank_of(int local_rank) const {
    return engine_->group_rank_of(local_rank);
  }

  // Messages this rank sent: all, and those its receivers read in one copy;
  // how many single-copy reads this rank's receives were refused; waits that
  // found their peer on this thread's CPU and yielded to it instead of spinning.
  struct Stats {
    uint64_t sent = 0;
    uint64_t sent_single_copy = 0;
    uint64_t single_copy_refused = 0;
    uint64_t shared_cpu_waits = 0;
  };
  Stats stats();

 private:
  using OpPtr = std::shared_ptr<P2pOp>;
  using Finished = std::vector<OpPtr>;

  // A message copied aside because a receive waited behind it (see above).
  struct Unexpected {
    int source;
    int64_t tag;
    std::vector<char> data;
    size_t filled = 0;
    OpPtr bound;  // a receive that matched it before it was complete
  };
  // Where the message now arriving from a source goes.
  struct Incoming {
    OpPtr op;                               // a matched receive, or
    std::list<Unexpected>::iterator aside;  // valid when `op` is null and `active`
    bool active = false;
  };

  // Everything below needs mutex_.
  bool progress(Finished& finished);
  bool send_to(int dst, Finished& finished);
  bool receive_from(int src, Finished& finished);
  bool write_chunks(int dst, const OpPtr& op, uint64_t& written);
  bool read_single_copy(const ChannelSlotHeader& header, char* destination);
  void check_health(Finished& finished, bool check_pids);
  bool match_unexpected(const OpPtr& recv, Finished& finished);
  OpPtr match_posted(int src, int64_t tag);
  bool receive_waits_on(int src) const;
  void finish(const OpPtr& op, std::exception_ptr error, Finished& finished);
  void fail(const OpPtr& op, const std::string& why, bool backend_error, Finished& finished);
  void refuse(int src, const OpPtr& recv, const std::string& why, Finished& finished);
  void close_outgoing(int dst, const std::string& why, Finished& finished);
  void close_incoming(int src, const std::string& why, Finished& finished);
  // Ops not yet finished that were posted before `posted_before` (default: any).
  bool has_pending(
      std::chrono::steady_clock::time_point posted_before = std::chrono::steady_clock::time_point::max()) const;

  // Without mutex_.
  bool run_pass();  // one progress pass; completes what finished; true when bytes moved
  void complete(Finished& finished);
  // Bumps `local_rank`'s doorbell (waking it if it sleeps) and publishes this rank's CPU.
  void ring(int local_rank);
  // True when op's peer (for a receive from any source: any other local rank)
  // last rang from the CPU this thread runs on.
  bool peer_shares_cpu(const P2pOp& op) const;
  void sleep_on_doorbell(std::chrono::nanoseconds slice);
  void progress_thread();
  std::string describe(const P2pOp& op) const;

  std::shared_ptr<Engine> engine_;
  const Segment& segment_;
  const int me_;
  const int local_size_;
  const bool spin_;
  const bool check_pids_;
  const size_t single_copy_bytes_;
  const size_t huge_pages_min_bytes_;
  Stats stats_;  // guarded by mutex_

  std::mutex mutex_;
  std::vector<std::deque<OpPtr>> sends_;  // per destination, in posting order
  std::list<OpPtr> recvs_;                // posted, not yet bound to a message, in posting order
  std::vector<OpPtr> bound_recvs_;        // bound, still receiving (for health checks)
  std::list<Unexpected> unexpected_;
  std::vector<Incoming> incoming_;        // per source
  std::vector<uint64_t> written_;         // per destination: slots this rank has filled
  std::vector<uint64_t> consumed_;        // per source: slots this rank has emptied
  std::vector<std::string> closed_out_;   // per destination: why the channel is dead (empty: alive)
  std::vector<std::string> closed_in_;    // per source
  std::string closed_;                    // close(): why everything is dead
  std::chrono::steady_clock::time_point next_health_check_;  // deadlines, departed peers
  std::chrono::steady_clock::time_point next_pid_check_;     // whether peers' processes exist

  std::atomic<int> waiters_{0};  // threads inside wait(): the progress thread stands back
  std::atomic<uint64_t> shared_cpu_waits_{0};  // Stats::shared_cpu_waits (counted outside mutex_)
  std::condition_variable wake_thread_;
  std::thread thread_;
  bool stop_ = false;    // guarded by mutex_
  bool parked_ = false;  // guarded by mutex_: the thread waits for a post
};

}  // namespace fastcomm::shm
