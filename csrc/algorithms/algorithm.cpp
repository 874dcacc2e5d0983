#include "algorithms/algorithm.h"

#include <algorithm>
#include <thread>

#include <ATen/core/jit_type.h>

namespace fastcomm {

namespace {

c10::intrusive_ptr<c10::ivalue::Future> new_tensor_list_future() {
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
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
  out.future = all->then(
      [futures, step = std::move(step), results = std::move(results)](c10::ivalue::Future& done) -> c10::IValue {
        done.value();  // rethrows collectAll's own error
        for (const auto& f : futures) {
          if (f->hasError()) std::rethrow_exception(f->exception_ptr());
        }
        if (step) step();
        return c10::IValue(results);
      },
      c10::ListType::ofTensors());
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
