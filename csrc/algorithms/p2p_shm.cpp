// p2p_shm: send, recv and recv from any source through the host's per-pair
// shared-memory channels (transport/shm/p2p_channels.h).
//
// Gate: CPU tensors (contiguous: validation refuses others) in a group whose
// ranks all live on one host. In a group that spans hosts every p2p op stays
// on Gloo: a receive from any source must listen on one transport, and a
// sender cannot know which one its receiver uses.
// Steps: below Config::p2p_single_copy_bytes (64 KiB) the message goes through
// the pair's ring in chunks of ~128 KiB, at most 8 in flight (S written into
// the ring, S read out of it); from there on the receiver reads it from the
// sender's memory (process_vm_readv: S copied once). No other rank takes part;
// nothing crosses a network.
//
// Execution: launch() posts the op and returns (it does not wait for the
// peer). The Work's wait() moves this rank's pending p2p ops on the calling
// thread (lowest latency); the channels' progress thread moves them while
// nobody waits. A launch makes one op and one Work and nothing else: the
// future is made when someone asks for it (pipelines and training loops call
// wait(), and a future, its callback and its completion cost as much as the
// rest of a small message's launch: benchmarks/peers/patterns.py pingpong).
#include <mutex>

#include <ATen/core/jit_type.h>

#include "algorithms/registry.h"
#include "core/errors.h"
#include "transport/shm/p2p_channels.h"

namespace fastcomm {

namespace {

using shm::P2pChannels;
using shm::P2pOp;

// The op, holding the tensor whose memory it moves (the channels hold the op
// until it finishes, so a dropped Work leaves the memory valid), and its
// future once asked for.
class TensorP2pOp final : public P2pOp {
 public:
  explicit TensorP2pOp(at::Tensor tensor) : tensor_(std::move(tensor)) {}

  const at::Tensor& tensor() const {
    return tensor_;
  }

  // The op's future (of [tensor]); made on the first request, completed as
  // the op finishes (or now, if it has).
  c10::intrusive_ptr<c10::ivalue::Future> future() {
    c10::intrusive_ptr<c10::ivalue::Future> made;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (future_) return future_;
      future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
      if (!completion_ran_) return future_;  // on_finished() completes it
      made = future_;
    }
    complete(made);
    return made;
  }

 private:
  // Exactly one of on_finished() and future() completes the future: whichever
  // finds the other's mark under the mutex.
  void on_finished() override {
    c10::intrusive_ptr<c10::ivalue::Future> waiting;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      completion_ran_ = true;
      waiting = future_;
    }
    if (waiting) complete(waiting);
  }

  void complete(const c10::intrusive_ptr<c10::ivalue::Future>& future) const {
    if (auto e = error()) {
      future->setError(e);
    } else {
      future->markCompleted(c10::IValue(std::vector<at::Tensor>{tensor_}));
    }
  }

  at::Tensor tensor_;
  std::mutex mutex_;
  bool completion_ran_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// What the Work's wait(), isCompleted(), getFuture() and sourceRank() act on.
class ShmP2pWork final : public c10d::Work {
 public:
  ShmP2pWork(int rank, c10d::OpType type, std::shared_ptr<P2pChannels> channels, std::shared_ptr<TensorP2pOp> op,
             std::chrono::milliseconds timeout)
      : c10d::Work(rank, type), channels_(std::move(channels)), op_(std::move(op)), timeout_(timeout) {}

  bool isCompleted() override {
    return channels_->poll(op_);
  }
  bool isSuccess() const override {
    return op_->finished() && !op_->error();
  }
  std::exception_ptr exception() const override {
    return op_->error();
  }
  bool wait(std::chrono::milliseconds timeout) override {
    channels_->wait(op_, timeout == kNoTimeout ? timeout_ : timeout);
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return op_->future();
  }
  std::vector<at::Tensor> result() override {
    return {op_->tensor()};
  }
  int sourceRank() const override {
    TORCH_CHECK(op_->finished() && op_->source() >= 0, "fastcomm recv: sourceRank() is known once the receive is done");
    return channels_->group_rank_of(op_->source());
  }

 private:
  std::shared_ptr<P2pChannels> channels_;
  std::shared_ptr<TensorP2pOp> op_;
  std::chrono::milliseconds timeout_;
};

class P2pShm final : public Algorithm {
 public:
  P2pShm(ShmTopology topology, std::shared_ptr<P2pChannels> channels)
      : topology_(std::move(topology)), channels_(std::move(channels)), local_rank_of_(topology_.group_size, -1) {
    for (int local = 0; local < topology_.engine->local_size(); ++local) {
      local_rank_of_[topology_.engine->group_rank_of(local)] = local;
    }
  }

  const char* name() const override {
    return "p2p_shm";
  }

  bool accepts(const Collective& c) const override {
    return c.device == c10::DeviceType::CPU && c.is_p2p() && topology_.single_host() && c.inputs.size() == 1 &&
           c.inputs[0].is_contiguous() && c.inputs[0].layout() == c10::kStrided;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    const at::Tensor& t = c.inputs[0];
    const bool send = c.type == c10d::OpType::SEND;
    const int peer = c.type == c10d::OpType::RECVANYSOURCE ? -1 : local_rank_of_[c.peer];
    auto op = std::make_shared<TensorP2pOp>(t);
    channels_->post(op, send ? P2pOp::Kind::kSend : P2pOp::Kind::kRecv, peer, c.tag, t.data_ptr(), t.nbytes(),
                    c.timeout);
    Launched out;
    out.driver = c10::make_intrusive<ShmP2pWork>(topology_.group_rank, c.type, channels_, std::move(op), c.timeout);
    out.works.push_back(out.driver);
    return out;
  }

 private:
  ShmTopology topology_;
  std::shared_ptr<P2pChannels> channels_;
  std::vector<int> local_rank_of_;  // group rank -> local rank
};

}  // namespace

std::unique_ptr<Algorithm> make_p2p_shm(ShmTopology topology, std::shared_ptr<shm::P2pChannels> channels) {
  return std::make_unique<P2pShm>(std::move(topology), std::move(channels));
}

}  // namespace fastcomm
