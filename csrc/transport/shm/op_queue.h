// A group's background thread for engine ops that should not block the thread
// that issues them (large all_reduce: DDP issues its buckets from the autograd
// thread and keeps computing while they are summed).
//
// Contract: jobs run one at a time, in the order they were pushed, on one
// thread. The engine's ops must happen in the same order on every rank, so an
// op issued anywhere else runs only after every job pushed before it
// (drain()), and an op issued on this thread itself (from a job, e.g. a
// future's callback that issues the next collective) runs there and then,
// inline: on every rank it then comes right after the job that issued it.
//
// The thread starts with the first push and ends when the queue is destroyed,
// after running what is queued (a job's waits are bounded by the op's
// timeout and end early when peers fail or leave). Jobs may refer to the
// queue's owner: its destructor runs them all before it returns, so an owner
// that holds the queue as its last member outlives every job.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace fastcomm::shm {

class OpQueue {
 public:
  OpQueue() = default;
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;
  // Runs what is queued and joins the thread (detaches it when called on it).
  ~OpQueue();

  // Queues `job`; it must not throw (a job reports its errors itself).
  void push(std::function<void()> job);
  // Returns once every job pushed so far has finished (at once on the queue's own thread).
  void drain();
  // True on the queue's thread (inside a job).
  bool on_queue_thread() const;
  // Jobs pushed so far (introspection and tests: which ops went to the queue).
  uint64_t pushed() const {
    return state_->pushed.load(std::memory_order_relaxed);
  }

 private:
  // Shared with the thread, so that a thread detached by a destructor that ran
  // inside one of its jobs finishes with state that is still alive.
  struct State {
    std::mutex mutex;
    std::condition_variable work;  // a job was pushed, or stop
    std::condition_variable idle;  // the queue became empty and no job runs
    std::deque<std::function<void()>> jobs;
    bool running_job = false;
    bool stop = false;
    // Jobs pushed and not yet finished; lets drain() return without the mutex
    // when nothing is queued (every inline engine op calls drain()).
    std::atomic<int64_t> unfinished{0};
    std::atomic<uint64_t> pushed{0};
    std::thread::id thread_id;
  };
  static void loop(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;  // guarded by state_->mutex
};

}  // namespace fastcomm::shm
