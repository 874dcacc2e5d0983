#include "algorithms/algorithm.h"

#include <algorithm>
#include <optional>
#include <thread>

#include <ATen/core/jit_type.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace fastcomm {

namespace {

c10::intrusive_ptr<c10::ivalue::Future> new_tensor_list_future() {
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
}

// Every device any of `futures` holds values on, once each (none for CPU futures).
std::vector<c10::Device> devices_of(const std::vector<c10::intrusive_ptr<c10::ivalue::Future>>& futures) {
  std::vector<c10::Device> devices;
  for (const auto& f : futures) {
    for (const auto& d : f->devices()) {
      if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
    }
  }
  return devices;
}

// A stream of the pool on each of `devices`, as Future::then's callbacks run on.
std::vector<c10::Stream> pool_streams(const std::vector<c10::Device>& devices) {
  std::vector<c10::Stream> streams;
  for (const auto& d : devices) streams.push_back(c10::impl::VirtualGuardImpl(d.type()).getStreamFromGlobalPool(d));
  return streams;
}

}  // namespace

Launched then_run(std::vector<Launched> parts, std::function<void()> step, std::vector<at::Tensor> results) {
  const bool all_finished = std::all_of(parts.begin(), parts.end(), [](const Launched& part) { return part.finished; });
  if (all_finished) {
    for (const auto& part : parts) {
      if (part.error) return failed(part.error);
    }
    try {
      if (step) step();
    } catch (...) {
      return failed(std::current_exception());
    }
    return finished();
  }
  Launched out;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> futures;
  for (auto& part : parts) {
    TORCH_INTERNAL_ASSERT(part.future || part.finished,
                          "fastcomm: then_run needs futures (p2p works cannot be chained)");
    futures.push_back(future_of(part, {}));  // a part's own results are not this future's
    out.works.insert(out.works.end(), part.works.begin(), part.works.end());
  }
  c10::intrusive_ptr<c10::ivalue::Future> all;
  if (futures.size() == 1) {
    all = futures[0];
  } else {
    c10::List<c10::intrusive_ptr<c10::ivalue::Future>> list(c10::FutureType::create(c10::ListType::ofTensors()));
    for (auto& f : futures) list.push_back(f);
    all = c10::collectAll(list);
  }
  // The result carries the parts' devices, so on CUDA it records events for
  // `results` and a Work::wait() makes the caller's stream wait for them.
  // collectAll's future has no devices, so then() on it would drop every
  // part's events: the callback does what Future::then does for a CUDA future
  // itself. It works on streams of the pool (never the caller's: work queued
  // after an async op must not wait for it), makes them wait for each part
  // (Future::wait on a completed future, which also records the parts' tensors,
  // the staged copies `step` reads, as used on them), runs `step` there and
  // completes the result there.
  auto chained = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors(), devices_of(futures));
  all->addCallback([futures, step = std::move(step), results = std::move(results), chained](c10::ivalue::Future& done) {
    if (done.hasError()) {  // collectAll fails at the first failed part, while others may still run
      chained->setError(done.exception_ptr());
      return;
    }
    std::optional<c10::MultiStreamGuard> on_pool_streams;
    if (!chained->devices().empty()) on_pool_streams.emplace(pool_streams(chained->devices()));
    std::exception_ptr error;
    try {
      for (const auto& f : futures) {
        f->wait();  // every part has completed: this only orders the current streams
        if (f->hasError()) std::rethrow_exception(f->exception_ptr());
      }
      if (step) step();
    } catch (...) {
      error = std::current_exception();
    }
    if (error) {
      chained->setError(error);
    } else {
      chained->markCompleted(c10::IValue(results));  // records its events on the pool streams
    }
  });
  out.future = chained;
  return out;
}

c10::intrusive_ptr<c10::ivalue::Future> future_by_waiting(c10::intrusive_ptr<c10d::Work> work,
                                                          std::vector<at::Tensor> results,
                                                          std::chrono::milliseconds timeout) {
  auto future = new_tensor_list_future();
  // Detached: the thread owns what it touches and ends when the work completes,
  // fails or times out, so it cannot outlive the group timeout.
  std::thread([future, work, results, timeout]() {
    try {
      work->wait(timeout);
      future->markCompleted(c10::IValue(results));
    } catch (...) {
      future->setError(std::current_exception());
    }
  }).detach();
  return future;
}

Launched pending() {
  Launched out;
  out.future = new_tensor_list_future();
  return out;
}

Launched finished() {
  Launched out;
  out.finished = true;
  return out;
}

Launched failed(std::exception_ptr error) {
  Launched out;
  out.finished = true;
  out.error = std::move(error);
  return out;
}

c10::intrusive_ptr<c10::ivalue::Future> completed_future(std::vector<at::Tensor> results) {
  auto future = new_tensor_list_future();
  future->markCompleted(c10::IValue(std::move(results)));
  return future;
}

c10::intrusive_ptr<c10::ivalue::Future> future_of(Launched& launched, const std::vector<at::Tensor>& results) {
  if (!launched.future && launched.finished) {
    if (launched.error) {
      launched.future = new_tensor_list_future();
      launched.future->setError(launched.error);
    } else {
      launched.future = completed_future(results);
    }
  }
  return launched.future;
}

}  // namespace fastcomm
