#include "transport/shm/p2p_channels.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include "core/errors.h"
#include "transport/shm/cross_memory.h"
#include "transport/shm/huge_pages.h"
#include "transport/shm/waiting.h"

namespace fastcomm::shm {

namespace {

// How often the progress thread looks for ops nobody waits for, and after
// how many empty looks it parks until the next post.
constexpr auto kThreadPoll = std::chrono::microseconds(500);
constexpr int kIdlePollsBeforePark = 200;
constexpr auto kHealthCheckInterval = std::chrono::microseconds(200);
// How a waiter waits before it sleeps on its doorbell. With a core per rank it
// spins ~2 ms, then yields 64 times: waiters that yield early let the
// scheduler keep two ranks on one core (it puts a woken rank beside its waker,
// and a yielding rank never looks busy enough to move), and every small
// exchange then pays a context switch (benchmarks/allreduce_vs_gloo.py --op
// sendrecv --api cpp; docs/algorithms.md "How fastcomm waits"). With more
// ranks than cores it does not spin: it yields up to 3000 times (~1 ms),
// handing the core to a rank that has work. A spinning waiter whose peer last
// rang from its own CPU yields instead of pausing for the rest of the spin
// (ping-pong beside a busy process: benchmarks/peers/patterns.py).
constexpr int kP2pSpinIterations = 20000;
constexpr int kP2pOversubscribedYields = 3000;

const char* op_name(P2pOp::Kind kind) {
  return kind == P2pOp::Kind::kSend ? "send" : "recv";
}

template <typename Container, typename Op>
void erase_op(Container& ops, const Op& op) {
  ops.erase(std::remove(ops.begin(), ops.end(), op), ops.end());
}

}  // namespace

P2pChannels::P2pChannels(std::shared_ptr<Engine> engine, size_t single_copy_bytes, size_t huge_pages_min_bytes)
    : engine_(std::move(engine)),
      segment_(engine_->segment()),
      me_(engine_->local_rank()),
      local_size_(engine_->local_size()),
      spin_(engine_->spins()),
      check_pids_(engine_->checks_pids()),
      single_copy_bytes_(single_copy_bytes),
      huge_pages_min_bytes_(huge_pages_min_bytes),
      sends_(local_size_),
      incoming_(local_size_),
      written_(local_size_, 0),
      consumed_(local_size_, 0),
      closed_out_(local_size_),
      closed_in_(local_size_),
      next_health_check_(std::chrono::steady_clock::now()),
      next_pid_check_(next_health_check_) {}

P2pChannels::~P2pChannels() {
  close("the process group was destroyed");
}

std::string P2pChannels::describe(const P2pOp& op) const {
  const bool send = op.kind_ == P2pOp::Kind::kSend;
  return c10::str("rank ", group_rank_of(me_), "'s ", op_name(op.kind_), " of ", op.bytes_, " B (tag ", op.tag_, ") ",
                  send ? "to" : "from", " ",
                  op.peer_ < 0 ? std::string("any rank") : c10::str("rank ", group_rank_of(op.peer_)));
}

void P2pChannels::post(const std::shared_ptr<P2pOp>& op, P2pOp::Kind kind, int peer, int64_t tag, void* data,
                       size_t bytes, std::chrono::milliseconds timeout) {
  TORCH_INTERNAL_ASSERT(peer != me_ && peer < local_size_ && (peer >= 0 || kind == P2pOp::Kind::kRecv),
                        "fastcomm p2p: bad local peer ", peer);
  // A large send buffer that comes back (a training loop's fresh activations
  // of one shape settle on a few heap addresses, step after step) goes into
  // huge pages before its address is published: the receiver's
  // process_vm_readv then pins 512x fewer pages (benchmarks/allreduce_vs_gloo.py
  // --op sendrecv --api cpp). Receive buffers are written locally, which pins
  // nothing: moving them gains nothing. A buffer sent to two peers at once may
  // be moved while one of them reads it: the kernel copies the block and
  // refuses one whose pages a reader holds pinned, so the reader sees the same
  // bytes either way.
  if (kind == P2pOp::Kind::kSend && single_copy_bytes_ > 0 && bytes >= single_copy_bytes_) {
    collapse_when_reused(data, bytes, huge_pages_min_bytes_);
  }
  TORCH_INTERNAL_ASSERT(!op->started_ && !op->finished(), "fastcomm p2p: an op is posted once");
  op->kind_ = kind;
  op->peer_ = peer;
  op->tag_ = tag;
  op->data_ = static_cast<char*>(data);
  op->bytes_ = bytes;
  op->timeout_ = timeout;
  op->posted_at_ = std::chrono::steady_clock::now();
  op->deadline_ = op->posted_at_ + timeout;
  Finished finished;
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string& closed = !closed_.empty()             ? closed_
                                : peer < 0                   ? closed_
                                : kind == P2pOp::Kind::kSend ? closed_out_[peer]
                                                             : closed_in_[peer];
    if (!closed.empty()) {
      fail(op, c10::str(describe(*op), " cannot start: the channel is closed: ", closed), true, finished);
    } else {
      if (kind == P2pOp::Kind::kSend) {
        sends_[peer].push_back(op);
      } else if (!match_unexpected(op, finished)) {
        recvs_.push_back(op);
      }
      progress(finished);
      if (!thread_.joinable()) thread_ = std::thread([this] { progress_thread(); });
      notify = parked_ && has_pending();
    }
  }
  if (notify) wake_thread_.notify_one();
  complete(finished);
}

P2pChannels::Stats P2pChannels::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats stats = stats_;
  stats.shared_cpu_waits = shared_cpu_waits_.load(std::memory_order_relaxed);
  return stats;
}

bool P2pChannels::poll(const std::shared_ptr<P2pOp>& op) {
  if (!op->finished()) run_pass();
  return op->finished();
}

void P2pChannels::wait(const std::shared_ptr<P2pOp>& op, std::chrono::milliseconds timeout) {
  if (!op->finished()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      op->deadline_ = std::min(op->deadline_, std::chrono::steady_clock::now() + timeout);
      op->timeout_ = std::min(op->timeout_, timeout);
    }
    waiters_.fetch_add(1);
    const int spins = spin_ ? kP2pSpinIterations : 0;
    const int yields = spin_ ? kYieldIterations : kP2pOversubscribedYields;
    int idle = 0;
    bool peer_on_my_cpu = false;
    while (!op->finished()) {
      if (run_pass()) {
        idle = 0;
        continue;
      }
      if (op->finished()) break;
      ++idle;
      if (idle < spins) {
        // A peer that last rang from this CPU needs the core this spin holds:
        // hand it over on each pass instead, for the rest of this wait (the
        // stages keep their lengths).
        if (idle % kSharedCpuCheckEvery == 1 && !peer_on_my_cpu && peer_shares_cpu(*op)) {
          peer_on_my_cpu = true;
          shared_cpu_waits_.fetch_add(1, std::memory_order_relaxed);
        }
        if (peer_on_my_cpu) {
          ::sched_yield();
        } else {
          cpu_relax();
        }
      } else if (idle < spins + yields) {
        ::sched_yield();
      } else {
        sleep_on_doorbell(kSleepSlice);
      }
    }
    waiters_.fetch_sub(1);
  }
  if (op->error_) std::rethrow_exception(op->error_);
}

void P2pChannels::close(const std::string& why) {
  Finished finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_.empty()) closed_ = why;
    stop_ = true;
    for (const auto peer : c10::irange(local_size_)) {
      if (peer == me_) continue;
      close_outgoing(peer, why, finished);
      close_incoming(peer, why, finished);
    }
    for (auto& op : recvs_) fail(op, c10::str(describe(*op), " was cancelled: ", why), true, finished);
    recvs_.clear();
  }
  wake_thread_.notify_all();
  futex_wake_all(&segment_.control(me_)->p2p_doorbell);
  complete(finished);
  if (thread_.joinable()) {
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();  // closed from a completion callback on the progress thread: it ends by itself
    } else {
      thread_.join();
    }
  }
}

// ---- progress (mutex_ held) ----

bool P2pChannels::progress(Finished& finished) {
  bool moved = false;
  for (const auto peer : c10::irange(local_size_)) {
    if (peer == me_) continue;
    moved |= send_to(peer, finished);
    moved |= receive_from(peer, finished);
  }
  // Deadlines and departed peers are looked at every kHealthCheckInterval,
  // not on every pass: a spinning waiter runs thousands of passes per ms.
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_health_check_) {
    next_health_check_ = now + kHealthCheckInterval;
    const bool check_pids = check_pids_ && now >= next_pid_check_;
    if (check_pids) next_pid_check_ = now + kPidCheckInterval;
    check_health(finished, check_pids);
  }
  return moved;
}

bool P2pChannels::send_to(int dst, Finished& finished) {
  auto& queue = sends_[dst];
  if (queue.empty()) return false;
  ChannelControl* channel = segment_.channel(me_, dst);
  if (channel->refused.load(std::memory_order_acquire)) {
    const std::string refusal(channel->refusal, strnlen(channel->refusal, sizeof(channel->refusal)));
    close_outgoing(dst, c10::str("the receiver refused a message: ", refusal), finished);
    return true;
  }
  bool moved = false;
  uint64_t written = written_[dst];
  while (!queue.empty()) {
    const OpPtr op = queue.front();
    if (op->awaiting_read_) {
      if (channel->consumed.load(std::memory_order_acquire) < op->read_at_) break;
      op->awaiting_read_ = false;
      // Read after `consumed` (acquire): the receiver sets the flag before freeing the slot.
      if (channel->single_copy_refused.load(std::memory_order_relaxed)) {
        op->moved_bytes_ = 0;  // the receiver still waits for this message: send it through the ring
      } else {
        ++stats_.sent_single_copy;
        op->moved_bytes_ = op->bytes_;
      }
      moved = true;
    }
    if (!op->started_ && single_copy_bytes_ > 0 && op->bytes_ >= single_copy_bytes_ &&
        !channel->single_copy_refused.load(std::memory_order_acquire)) {
      if (written - channel->consumed.load(std::memory_order_acquire) >= static_cast<uint64_t>(kChannelSlots)) break;
      auto* header = reinterpret_cast<ChannelSlotHeader*>(
          segment_.channel_slot(me_, dst, static_cast<int>(written % kChannelSlots)));
      *header = ChannelSlotHeader{
          op->bytes_, 0, 0, op->tag_, reinterpret_cast<uint64_t>(op->data_), static_cast<int32_t>(::getpid()), 1};
      channel->written.store(++written, std::memory_order_release);
      written_[dst] = written;
      ring(dst);
      op->started_ = true;
      op->awaiting_read_ = true;
      op->read_at_ = written;
      moved = true;
      break;  // complete once the receiver has read it
    }
    moved |= write_chunks(dst, op, written);
    if (!op->started_ || op->moved_bytes_ < op->bytes_) break;  // the ring is full
    queue.pop_front();
    ++stats_.sent;
    finish(op, nullptr, finished);
  }
  return moved;
}

bool P2pChannels::write_chunks(int dst, const OpPtr& op, uint64_t& written) {
  ChannelControl* channel = segment_.channel(me_, dst);
  bool moved = false;
  while (!op->started_ || op->moved_bytes_ < op->bytes_) {
    if (written - channel->consumed.load(std::memory_order_acquire) >= static_cast<uint64_t>(kChannelSlots)) break;
    char* slot = segment_.channel_slot(me_, dst, static_cast<int>(written % kChannelSlots));
    const size_t n = std::min(kChannelPayloadBytes, op->bytes_ - op->moved_bytes_);
    *reinterpret_cast<ChannelSlotHeader*>(slot) = ChannelSlotHeader{op->bytes_, op->moved_bytes_, n, op->tag_, 0, 0, 0};
    if (n > 0) std::memcpy(slot + kChannelHeaderBytes, op->data_ + op->moved_bytes_, n);
    op->moved_bytes_ += n;
    op->started_ = true;
    channel->written.store(++written, std::memory_order_release);
    written_[dst] = written;
    ring(dst);
    moved = true;
  }
  return moved;
}

bool P2pChannels::read_single_copy(const ChannelSlotHeader& header, char* destination) {
  // A refusal (ptrace rules, another pid namespace): the sender sends it again through the ring.
  return read_process_memory(header.pid, header.address, destination, header.message_bytes);
}

bool P2pChannels::receive_from(int src, Finished& finished) {
  if (!closed_in_[src].empty()) return false;
  ChannelControl* channel = segment_.channel(src, me_);
  Incoming& in = incoming_[src];
  bool moved = false;
  uint64_t consumed = consumed_[src];
  while (channel->written.load(std::memory_order_acquire) > consumed) {
    const char* slot = segment_.channel_slot(src, me_, static_cast<int>(consumed % kChannelSlots));
    const ChannelSlotHeader header = *reinterpret_cast<const ChannelSlotHeader*>(slot);
    if (!in.active) {  // the first chunk of a message
      if (OpPtr recv = match_posted(src, header.tag)) {
        if (header.message_bytes != recv->bytes_) {
          refuse(src, recv,
                 c10::str(describe(*recv), " matched a message of ", header.message_bytes, " B from rank ",
                          group_rank_of(src), ": the sizes differ"),
                 finished);
          return true;
        }
        recv->started_ = true;
        recv->source_ = src;
        bound_recvs_.push_back(recv);
        in.op = recv;
      } else if (receive_waits_on(src)) {
        unexpected_.push_back(Unexpected{src, header.tag, std::vector<char>(header.message_bytes), 0, nullptr});
        in.op = nullptr;
        in.aside = std::prev(unexpected_.end());
      } else {
        break;  // nobody wants it yet: it waits in the ring
      }
      in.active = true;
    }
    char* destination = in.op ? in.op->data_ : in.aside->data.data();
    size_t arrived = header.chunk_bytes;
    if (header.single_copy) {
      arrived = header.message_bytes;
      if (!read_single_copy(header, destination)) {
        arrived = 0;  // the message stays bound here and comes again through the ring
        ++stats_.single_copy_refused;
        channel->single_copy_refused.store(1, std::memory_order_relaxed);  // published by `consumed` below
      }
    } else if (header.chunk_bytes > 0) {
      std::memcpy(destination + header.offset, slot + kChannelHeaderBytes, header.chunk_bytes);
    }
    channel->consumed.store(++consumed, std::memory_order_release);
    consumed_[src] = consumed;
    ring(src);
    moved = true;
    if (header.single_copy && arrived == 0) continue;
    if (in.op) {
      in.op->moved_bytes_ += arrived;
      if (in.op->moved_bytes_ == in.op->bytes_) {
        erase_op(bound_recvs_, in.op);
        finish(in.op, nullptr, finished);
        in = Incoming{};
      }
    } else {
      Unexpected& aside = *in.aside;
      aside.filled += arrived;
      if (aside.filled == aside.data.size()) {
        if (aside.bound) {
          if (!aside.data.empty()) std::memcpy(aside.bound->data_, aside.data.data(), aside.data.size());
          erase_op(bound_recvs_, aside.bound);
          finish(aside.bound, nullptr, finished);
          unexpected_.erase(in.aside);
        }
        in = Incoming{};
      }
    }
  }
  return moved;
}

bool P2pChannels::match_unexpected(const OpPtr& recv, Finished& finished) {
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (it->bound || it->tag != recv->tag_ || (recv->peer_ >= 0 && recv->peer_ != it->source)) continue;
    const int src = it->source;
    if (it->data.size() != recv->bytes_) {
      refuse(src, recv,
             c10::str(describe(*recv), " matched a message of ", it->data.size(), " B from rank ", group_rank_of(src),
                      ": the sizes differ"),
             finished);
      return true;
    }
    recv->started_ = true;
    recv->source_ = src;
    if (it->filled == it->data.size()) {  // all arrived (a message being copied aside has filled < size)
      if (!it->data.empty()) std::memcpy(recv->data_, it->data.data(), it->data.size());
      unexpected_.erase(it);
      finish(recv, nullptr, finished);
    } else {
      it->bound = recv;
      bound_recvs_.push_back(recv);
    }
    return true;
  }
  return false;
}

P2pChannels::OpPtr P2pChannels::match_posted(int src, int64_t tag) {
  for (auto it = recvs_.begin(); it != recvs_.end(); ++it) {
    if ((*it)->tag_ == tag && ((*it)->peer_ == src || (*it)->peer_ < 0)) {
      OpPtr recv = *it;
      recvs_.erase(it);
      return recv;
    }
  }
  return nullptr;
}

bool P2pChannels::receive_waits_on(int src) const {
  return std::any_of(recvs_.begin(), recvs_.end(), [src](const OpPtr& r) { return r->peer_ == src || r->peer_ < 0; });
}

void P2pChannels::check_health(Finished& finished, bool check_pids) {
  for (const auto peer : c10::irange(local_size_)) {
    if (peer == me_) continue;
    const bool involved =
        !sends_[peer].empty() || incoming_[peer].active ||
        std::any_of(recvs_.begin(), recvs_.end(), [peer](const OpPtr& r) { return r->peer_ == peer; });
    if (!involved) continue;
    const RankControl* control = segment_.control(peer);
    std::string why;
    if (control->left.load(std::memory_order_acquire)) {
      why = c10::str("rank ", group_rank_of(peer),
                     " left the group (shutdown, abort or destroy_process_group) with messages pending");
    } else if (check_pids && !process_alive(control->pid)) {
      why =
          c10::str("rank ", group_rank_of(peer), " (pid ", control->pid, ") on this host exited with messages pending");
    }
    if (!why.empty()) {
      close_outgoing(peer, why, finished);
      close_incoming(peer, why, finished);
    }
  }
  const auto now = std::chrono::steady_clock::now();
  auto timed_out = [this](const P2pOp& op) {
    return c10::str(describe(op), " timed out after ", op.timeout_.count(), " ms with ", op.moved_bytes_, " of ",
                    op.bytes_, " B moved (the peer did not ", op.kind_ == P2pOp::Kind::kSend ? "receive" : "send",
                    " it, is stuck, or waits for something else)");
  };
  for (const auto dst : c10::irange(local_size_)) {
    auto& queue = sends_[dst];
    for (size_t i = 0; i < queue.size();) {
      const OpPtr op = queue[i];
      if (op->deadline_ > now) {
        ++i;
      } else if (op->started_) {
        close_outgoing(dst, timed_out(*op), finished);  // half a message is in the ring: the channel is unusable
        break;
      } else {
        queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(i));
        fail(op, timed_out(*op), true, finished);
      }
    }
  }
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    if ((*it)->deadline_ <= now) {
      fail(*it, timed_out(**it), true, finished);
      it = recvs_.erase(it);
    } else {
      ++it;
    }
  }
  for (const OpPtr& op : std::vector<OpPtr>(bound_recvs_)) {
    if (op->deadline_ <= now && !op->finished()) close_incoming(op->source_, timed_out(*op), finished);
  }
}

// ---- failures (mutex_ held) ----

void P2pChannels::finish(const OpPtr& op, std::exception_ptr error, Finished& finished) {
  op->error_ = std::move(error);
  op->finished_.store(true, std::memory_order_release);
  finished.push_back(op);
}

void P2pChannels::fail(const OpPtr& op, const std::string& why, bool backend_error, Finished& finished) {
  if (op->finished()) return;
  std::exception_ptr error;
  try {
    if (backend_error) FC_THROW_BACKEND_ERROR(op_name(op->kind_), why);
    FC_CHECK(false, op_name(op->kind_), why);
  } catch (...) {
    error = std::current_exception();
  }
  finish(op, error, finished);
}

void P2pChannels::refuse(int src, const OpPtr& recv, const std::string& why, Finished& finished) {
  ChannelControl* channel = segment_.channel(src, me_);
  const size_t n = std::min(why.size(), sizeof(channel->refusal) - 1);
  std::memcpy(channel->refusal, why.data(), n);
  channel->refusal[n] = '\0';
  channel->refused.store(1, std::memory_order_release);
  ring(src);
  fail(recv, why, false, finished);
  close_incoming(src, why, finished);
}

void P2pChannels::close_outgoing(int dst, const std::string& why, Finished& finished) {
  if (closed_out_[dst].empty()) closed_out_[dst] = why;
  for (const OpPtr& op : sends_[dst]) fail(op, why, true, finished);
  sends_[dst].clear();
}

void P2pChannels::close_incoming(int src, const std::string& why, Finished& finished) {
  if (closed_in_[src].empty()) closed_in_[src] = why;
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    if ((*it)->peer_ == src) {
      fail(*it, why, true, finished);
      it = recvs_.erase(it);
    } else {
      ++it;
    }
  }
  for (const OpPtr& op : std::vector<OpPtr>(bound_recvs_)) {
    if (op->source_ != src) continue;
    fail(op, why, true, finished);
    erase_op(bound_recvs_, op);
  }
  unexpected_.remove_if([src](const Unexpected& u) { return u.source == src; });
  incoming_[src] = Incoming{};
}

bool P2pChannels::has_pending(std::chrono::steady_clock::time_point posted_before) const {
  auto old = [posted_before](const OpPtr& op) { return op->posted_at_ < posted_before; };
  return std::any_of(recvs_.begin(), recvs_.end(), old) || std::any_of(bound_recvs_.begin(), bound_recvs_.end(), old) ||
         std::any_of(sends_.begin(), sends_.end(),
                     [&old](const std::deque<OpPtr>& q) { return std::any_of(q.begin(), q.end(), old); });
}

// ---- without mutex_ ----

bool P2pChannels::run_pass() {
  Finished finished;
  bool moved;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    moved = progress(finished);
  }
  complete(finished);
  return moved || !finished.empty();
}

void P2pChannels::complete(Finished& finished) {
  for (const OpPtr& op : finished) op->on_finished();
}

bool P2pChannels::peer_shares_cpu(const P2pOp& op) const {
  const int cpu = ::sched_getcpu();
  if (op.peer_ >= 0) return last_ran_on(*segment_.control(op.peer_), cpu);
  // A receive from any source: whichever rank sends may be the one on this CPU.
  for (const auto r : c10::irange(local_size_)) {
    if (r != me_ && last_ran_on(*segment_.control(r), cpu)) return true;
  }
  return false;
}

void P2pChannels::ring(int local_rank) {
  publish_cpu(*segment_.control(me_));  // for a waiting peer's peer_shares_cpu
  RankControl* control = segment_.control(local_rank);
  // Dekker pairing with sleep_on_doorbell (as in Engine::post): the counter
  // written before this bump is seen by a sleeper whose doorbell read follows it.
  control->p2p_doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (control->p2p_sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(&control->p2p_doorbell);
}

void P2pChannels::sleep_on_doorbell(std::chrono::nanoseconds slice) {
  RankControl* control = segment_.control(me_);
  const uint32_t word = control->p2p_doorbell.load(std::memory_order_seq_cst);
  control->p2p_sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (!run_pass()) futex_wait(&control->p2p_doorbell, word, slice);
  control->p2p_sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void P2pChannels::progress_thread() {
  // The thread polls instead of being notified per op: a caller that waits
  // right after posting (the common case) finishes the op itself, and a
  // notification per op would cost a futex call and a context switch.
  std::unique_lock<std::mutex> lock(mutex_);
  int idle_polls = 0;
  while (!stop_) {
    if (!has_pending() && ++idle_polls > kIdlePollsBeforePark) {
      parked_ = true;  // post() notifies a parked thread
      wake_thread_.wait(lock, [this] { return stop_ || has_pending(); });
      parked_ = false;
      idle_polls = 0;
      continue;
    }
    wake_thread_.wait_for(lock, kThreadPoll);
    // Only ops older than a poll: a caller about to wait would otherwise find
    // the thread registered on its doorbell (peers then pay a futex wake per
    // chunk) and competing for the mutex and a core.
    if (stop_ || waiters_.load() > 0 || !has_pending(std::chrono::steady_clock::now() - kThreadPoll)) continue;
    idle_polls = 0;
    lock.unlock();
    // Nobody waits for these ops: move them until none is left, a waiter takes over, or close().
    while (true) {
      if (run_pass()) continue;
      lock.lock();
      if (stop_ || !has_pending() || waiters_.load() > 0) break;
      lock.unlock();
      sleep_on_doorbell(kSleepSlice);
    }
  }
}

}  // namespace fastcomm::shm
