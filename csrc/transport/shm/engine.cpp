#include "transport/shm/engine.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include "core/errors.h"
#include "core/names.h"
#include "transport/shm/waiting.h"

namespace fastcomm::shm {

namespace {

bool same(const OpDescriptor& a, const OpDescriptor& b) {
  return a.op_index == b.op_index && a.type == b.type && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.root == b.root && a.algorithm == b.algorithm && a.input_bytes == b.input_bytes &&
         a.output_bytes == b.output_bytes;
}

// The names protocol_code has seen, by code (read only to describe a mismatch);
// copies, since an algorithm's name may die with its group.
std::mutex protocol_names_mutex;
std::map<uint16_t, std::string>& protocol_names() {
  static std::map<uint16_t, std::string> names;
  return names;
}

}  // namespace

uint16_t protocol_code(const char* name) {
  uint32_t hash = 2166136261u;  // FNV-1a, folded to 16 bits
  for (const char* p = name; *p; ++p) hash = (hash ^ static_cast<uint8_t>(*p)) * 16777619u;
  const auto code = static_cast<uint16_t>((hash >> 16) ^ (hash & 0xffff));
  std::lock_guard<std::mutex> lock(protocol_names_mutex);
  protocol_names().try_emplace(code, name);
  return code;
}

namespace {

std::string algorithm_name(uint16_t code) {
  std::lock_guard<std::mutex> lock(protocol_names_mutex);
  const auto it = protocol_names().find(code);
  return it != protocol_names().end() ? it->second : c10::str("algorithm #", code);
}

}  // namespace

std::string describe(const OpDescriptor& d) {
  return c10::str(op_type_name(d.type),
                  d.dtype >= 0 ? c10::str(" of ", static_cast<c10::ScalarType>(d.dtype)) : std::string(), " (input ",
                  d.input_bytes, " B, output ", d.output_bytes, " B",
                  d.reduce_op >= 0 ? c10::str(", ", reduce_op_name(d.reduce_op)) : std::string(),
                  d.root >= 0 ? c10::str(", root ", d.root) : std::string(),
                  d.root == kRootArena ? ", arena tensor" : "", ", by ", algorithm_name(d.algorithm), ")");
}

Engine::Engine(std::unique_ptr<Segment> segment, int local_rank, std::vector<int> group_ranks, bool spin,
               bool check_pids)
    : segment_(std::move(segment)),
      header_(segment_->header()),
      local_rank_(local_rank),
      local_size_(segment_->local_size()),
      slot_bytes_(segment_->slot_bytes()),
      group_ranks_(std::move(group_ranks)),
      spin_iterations_(spin ? kSpinIterations : 0),
      yield_iterations_(kYieldIterations),
      check_pids_(check_pids),
      pulling_(*segment_, local_rank_),
      keeping_(*segment_, check_pids_) {
  TORCH_CHECK(local_rank_ >= 0 && local_rank_ < local_size_, "fastcomm shm: local rank ", local_rank_,
              " outside a host of ", local_size_);
  TORCH_CHECK(static_cast<int>(group_ranks_.size()) == local_size_, "fastcomm shm: ", group_ranks_.size(),
              " group ranks for a host of ", local_size_);
  segment_->control(local_rank_)->pid = static_cast<int32_t>(::getpid());
}

void Engine::begin(const char* op, OpDescriptor descriptor, std::chrono::milliseconds timeout,
                   std::chrono::steady_clock::time_point issued) {
  op_ = op;
  pulling_.begin_op(std::max(descriptor.input_bytes, descriptor.output_bytes));
  keeping_.begin_op(issued);  // recent enough: ops wait on the queue only where CPUs are spare, never where it acts
  if (!broken_.empty()) FC_THROW_BACKEND_ERROR(op, "the shared-memory engine of this group failed earlier: ", broken_);
  descriptor.op_index = static_cast<uint32_t>(op_index_++);
  descriptor_ = descriptor;
  descriptor_pending_ = true;
  timeout_ = timeout;
  deadline_ = issued + timeout;
  next_pid_check_ = issued + kPidCheckInterval;  // `issued` is recent enough; a clock read less per op
}

void Engine::start_use() {
  buffer_ ^= 1;
  rounds_in_use_ = 0;
  if (descriptor_pending_) {
    segment_->control(local_rank_)->descriptor[buffer_] = descriptor_;
    descriptor_pending_ = false;
    check_pending_ = true;
  }
}

void Engine::round() {
  TORCH_INTERNAL_ASSERT(!descriptor_pending_, "fastcomm shm: round() before the op's first start_use()");
  TORCH_INTERNAL_ASSERT(++rounds_in_use_ <= 2, "fastcomm shm: a buffer use spans at most two rounds");
  post();
  wait_all(posted_);
  if (check_pending_) {
    check_pending_ = false;
    check_descriptors();
  }
}

void Engine::post() {
  publish_cpu(*segment_->control(local_rank_));  // for a waiting peer's missing_rank_shares_cpu
  ++posted_;
  segment_->control(local_rank_)->posted.store(posted_, std::memory_order_seq_cst);
  // Dekker pairing with sleep_until: a sleeper increments `sleepers` before its
  // last look at `posted`, a poster stores `posted` before looking at `sleepers`
  // (both seq_cst), so at least one of them sees the other.
  if (header_->sleepers.load(std::memory_order_seq_cst) > 0) {
    header_->wake_word.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&header_->wake_word);
  }
}

void Engine::open_my_pieces() {
  // Relaxed: the round that follows (a seq_cst store) publishes it. Every
  // claim of the previous op, failed ones included, came before its claimer
  // posted that op's last round, which this rank has seen: the reset is later.
  segment_->control(local_rank_)->pieces_claimed.store(0, std::memory_order_relaxed);
}

int64_t Engine::claim_piece(int owner, int64_t pieces) {
  // Relaxed: a claim only decides who touches a piece (nobody else does); the
  // op's last round orders the data.
  const uint64_t claimed = segment_->control(owner)->pieces_claimed.fetch_add(1, std::memory_order_relaxed);
  if (claimed >= static_cast<uint64_t>(pieces)) return -1;
  if (owner != local_rank_) ++pieces_taken_over_;
  return static_cast<int64_t>(claimed);
}

bool Engine::all_posted(uint64_t target) const {
  for (const auto r : c10::irange(local_size_)) {
    if (segment_->control(r)->posted.load(std::memory_order_acquire) < target) return false;
  }
  return true;
}

void Engine::wait_all(uint64_t target) {
  if (all_posted(target)) return;
  const auto started = std::chrono::steady_clock::now();
  // Only a wait on the caller's thread keeps its CPU past the pause loop: on
  // the op queue the caller goes on computing beside it (DDP's backward), and
  // a yielding waiter would still take turns with it. Nor where the host's
  // ranks outnumber their CPUs (spin_iterations_ == 0): the rank waited for
  // often shares the waiter's CPU, and there the short stage measured faster
  // (benchmarks/peers/patterns.py --nproc 4 on 2 CPUs, fastcomm-backend
  // against fastcomm-backend-nobudget).
  const bool on_caller = follows_spin_budget_ && spin_iterations_ > 0 && !queue().on_queue_thread();
  if (!wait_awake(target, started + (on_caller ? spin_budget_.next() : std::chrono::nanoseconds(0)))) {
    ++sleeps_;
    pulling_.before_sleep(target);
    sleep_until(target);
  }
  if (on_caller) spin_budget_.record(std::chrono::steady_clock::now() - started);
}

bool Engine::wait_awake(uint64_t target, std::chrono::steady_clock::time_point yield_until) {
  const int cpu = ::sched_getcpu();
  // Ranks that outnumber their CPUs spin only while home keeping finds the host quiet (home_keeping.h).
  const int spins = spin_iterations_ > 0 ? spin_iterations_ : keeping_.host_quiet() ? kSpinIterations : 0;
  for (int i = 0; i < spins; ++i) {
    cpu_relax();
    if (all_posted(target)) return true;
    if (i % kSharedCpuCheckEvery == 0 && missing_rank_shares_cpu(target, cpu)) break;  // yield the core to it
  }
  // Yielding: a runnable thread of this CPU (a peer rank, a neighbour) runs at once (spin_budget.h).
  for (int i = 0; i < yield_iterations_ || std::chrono::steady_clock::now() < yield_until; ++i) {
    ::sched_yield();
    if (all_posted(target)) return true;
  }
  return false;
}

bool Engine::missing_rank_shares_cpu(uint64_t target, int cpu) const {
  for (const auto r : c10::irange(local_size_)) {
    const RankControl* peer = segment_->control(r);
    if (r != local_rank_ && peer->posted.load(std::memory_order_relaxed) < target && last_ran_on(*peer, cpu)) {
      return true;
    }
  }
  return false;
}

void Engine::sleep_until(uint64_t target) {
  while (true) {
    const uint32_t word = header_->wake_word.load(std::memory_order_seq_cst);
    header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (all_posted(target)) {
      header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return;
    }
    // While a peer may still need pulling, wake up often enough to see it was preempted.
    futex_wait(&header_->wake_word, word, pulling_.armed() ? kPullCheckSlice : kSleepSlice);
    header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (all_posted(target)) return;
    pulling_.after_wake(target);
    check_health();
  }
}

std::string Engine::missing_ranks() const {
  std::string missing;
  for (const auto r : c10::irange(local_size_)) {
    if (segment_->control(r)->posted.load(std::memory_order_acquire) < posted_) {
      missing += c10::str(missing.empty() ? "" : ", ", group_ranks_[r]);
    }
  }
  return missing;
}

void Engine::check_health() {
  const int failed = header_->failed_rank_plus_one.load(std::memory_order_acquire);
  if (failed > 0) {
    const std::string reason(header_->failure_reason,
                             strnlen(header_->failure_reason, sizeof(header_->failure_reason)));
    broken_ = c10::str("rank ", group_ranks_[failed - 1], " gave up on a collective: ", reason);
    const std::string missing = missing_ranks();
    FC_THROW_BACKEND_ERROR(op_, "stopped waiting: ", broken_,
                           missing.empty() ? std::string() : c10::str("; rank(s) ", missing, " had not arrived"));
  }
  for (const auto r : c10::irange(local_size_)) {
    const RankControl* peer = segment_->control(r);
    if (peer->left.load(std::memory_order_acquire) && peer->posted.load(std::memory_order_acquire) < posted_) {
      // Not fail(): the peer is gone, not this op's fault; every waiting peer sees the flag itself.
      broken_ =
          c10::str("rank ", group_ranks_[r], " left the group (shutdown, abort or destroy_process_group) while rank ",
                   group_ranks_[local_rank_], " waited for it");
      FC_THROW_BACKEND_ERROR(op_, broken_);
    }
  }
  const auto now = std::chrono::steady_clock::now();
  if (check_pids_ && now >= next_pid_check_) {
    next_pid_check_ = now + kPidCheckInterval;
    for (const auto r : c10::irange(local_size_)) {
      if (r == local_rank_) continue;
      const int pid = segment_->control(r)->pid;
      if (!process_alive(pid)) {
        fail(c10::str("rank ", group_ranks_[r], " (pid ", pid, ") on this host exited while rank ",
                      group_ranks_[local_rank_], " waited for it"));
      }
    }
  }
  if (now >= deadline_) {
    fail(c10::str("timed out after ", timeout_.count(), " ms waiting for rank(s) ", missing_ranks(),
                  " (a peer is stuck, dead, or called a different collective)"));
  }
}

void Engine::skip_op() {
  if (!queue().on_queue_thread()) queue().drain();
  std::lock_guard<std::mutex> one_op_at_a_time(op_mutex());
  ++op_index_;
}

void Engine::check_descriptors() {
  const OpDescriptor& mine = segment_->control(local_rank_)->descriptor[buffer_];
  for (const auto r : c10::irange(local_size_)) {
    const OpDescriptor& theirs = segment_->control(r)->descriptor[buffer_];
    if (!same(mine, theirs)) {
      // Every rank sees the same descriptors, so every rank raises here, after
      // the same number of rounds: the engine stays usable.
      FC_CHECK(false, op_, "ranks disagree on the collective: rank ", group_ranks_[local_rank_], " called ",
               describe(mine), " as its op #", mine.op_index, ", rank ", group_ranks_[r], " called ", describe(theirs),
               " as its op #", theirs.op_index);
    }
  }
}

void Engine::leave() {
  segment_->control(local_rank_)->left.store(1, std::memory_order_seq_cst);
  header_->wake_word.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&header_->wake_word);
}

void Engine::fail(const std::string& why) {
  broken_ = why;
  int32_t unclaimed = 0;
  if (header_->failure_claim.compare_exchange_strong(unclaimed, local_rank_ + 1, std::memory_order_acq_rel)) {
    const size_t n = std::min(why.size(), sizeof(header_->failure_reason) - 1);
    std::memcpy(header_->failure_reason, why.data(), n);
    header_->failure_reason[n] = '\0';
    header_->failed_rank_plus_one.store(local_rank_ + 1, std::memory_order_release);
  }
  header_->wake_word.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&header_->wake_word);
  FC_THROW_BACKEND_ERROR(op_, why);
}

}  // namespace fastcomm::shm
