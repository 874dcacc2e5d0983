#include "transport/shm/op_queue.h"

namespace fastcomm::shm {

OpQueue::~OpQueue() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
    thread = std::move(thread_);
  }
  state_->work.notify_all();
  if (!thread.joinable()) return;
  if (std::this_thread::get_id() != thread.get_id()) {
    thread.join();  // after running every queued job
    return;
  }
  // The last owner let go inside a job: run what is left here, while the
  // owner's members are still alive, and let the loop end on its own state.
  thread.detach();
  while (true) {
    std::function<void()> job;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (state_->jobs.empty()) break;
      job = std::move(state_->jobs.front());
      state_->jobs.pop_front();
    }
    job();
    state_->unfinished.fetch_sub(1, std::memory_order_release);
  }
}

void OpQueue::push(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->unfinished.fetch_add(1, std::memory_order_relaxed);
    state_->pushed.fetch_add(1, std::memory_order_relaxed);
    state_->jobs.push_back(std::move(job));
    if (!thread_.joinable()) {
      thread_ = std::thread([state = state_] { loop(state); });
      state_->thread_id = thread_.get_id();
    }
  }
  state_->work.notify_one();
}

void OpQueue::drain() {
  // Acquire pairs with loop()'s release: a zero seen here means every job
  // pushed before this call finished, and its writes are visible.
  if (state_->unfinished.load(std::memory_order_acquire) == 0) return;
  std::unique_lock<std::mutex> lock(state_->mutex);
  if (std::this_thread::get_id() == state_->thread_id) return;
  state_->idle.wait(lock, [this] { return state_->jobs.empty() && !state_->running_job; });
}

bool OpQueue::on_queue_thread() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return std::this_thread::get_id() == state_->thread_id;
}

void OpQueue::loop(const std::shared_ptr<State>& state) {
  std::unique_lock<std::mutex> lock(state->mutex);
  while (true) {
    state->work.wait(lock, [&] { return state->stop || !state->jobs.empty(); });
    if (state->jobs.empty()) return;  // stopped, and nothing left to run
    std::function<void()> job = std::move(state->jobs.front());
    state->jobs.pop_front();
    state->running_job = true;
    lock.unlock();
    job();
    job = nullptr;  // what the job held is released outside the lock
    lock.lock();
    state->running_job = false;
    state->unfinished.fetch_sub(1, std::memory_order_release);
    if (state->jobs.empty()) state->idle.notify_all();
  }
}

}  // namespace fastcomm::shm
