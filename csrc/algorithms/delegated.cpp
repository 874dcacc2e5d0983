#include "algorithms/delegated.h"

#include "core/errors.h"

namespace fastcomm {

namespace {

class Delegated final : public Algorithm {
 public:
  Delegated(std::string name, c10::DeviceType device, c10::intrusive_ptr<c10d::Backend> backend)
      : name_(std::move(name)), device_(device), backend_(std::move(backend)) {}

  const char* name() const override {
    return name_.c_str();
  }

  bool accepts(const Collective& c) const override {
    return backend_ && c.device == device_;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    c10::intrusive_ptr<c10d::Work> work = start(c);
    Launched out;
    out.works.push_back(work);
    if (c.is_p2p()) return out;  // Gloo's send/recv works have no future
    auto result = c.result_tensors();
    c10::intrusive_ptr<c10::ivalue::Future> inner;
    try {
      inner = work->getFuture();
    } catch (const c10::Error&) {
      // Some Gloo works (e.g. list reduce_scatter) implement no future.
      out.future = future_by_waiting(work, result, c.timeout);
      return out;
    }
    out.future = inner->then(
        [result](c10::ivalue::Future& done) -> c10::IValue {
          done.value();  // rethrows the delegate's error
          return c10::IValue(result);
        },
        c10::ListType::ofTensors());
    return out;
  }

 private:
  c10::intrusive_ptr<c10d::Work> start(Collective& c) {
    using c10d::OpType;
    switch (c.type) {
      case OpType::BROADCAST: {
        c10d::BroadcastOptions o;
        o.rootRank = c.peer;
        o.timeout = c.timeout;
        return backend_->broadcast(c.inputs, o);
      }
      case OpType::ALLREDUCE: {
        c10d::AllreduceOptions o;
        o.reduceOp = c.reduce_op;
        o.timeout = c.timeout;
        return backend_->allreduce(c.inputs, o);
      }
      case OpType::ALLREDUCE_COALESCED: {
        c10d::AllreduceCoalescedOptions o;
        o.reduceOp = c.reduce_op;
        o.timeout = c.timeout;
        return backend_->allreduce_coalesced(c.inputs, o);
      }
      case OpType::REDUCE: {
        c10d::ReduceOptions o;
        o.reduceOp = c.reduce_op;
        o.rootRank = c.peer;
        o.timeout = c.timeout;
        return backend_->reduce(c.inputs, o);
      }
      case OpType::ALLGATHER: {
        c10d::AllgatherOptions o;
        o.timeout = c.timeout;
        return backend_->allgather(c.output_lists, c.inputs, o);
      }
      case OpType::_ALLGATHER_BASE: {
        c10d::AllgatherOptions o;
        o.timeout = c.timeout;
        // Flat views: Gloo insists the output be (world_size * dim0, ...) shaped;
        // fastcomm also accepts (world_size, *input.shape) as NCCL does.
        at::Tensor out = c.outputs[0].view(-1), in = c.inputs[0].view(-1);
        return backend_->_allgather_base(out, in, o);
      }
      case OpType::ALLGATHER_COALESCED: {
        c10d::AllgatherOptions o;
        o.timeout = c.timeout;
        if (!c.output_lists.empty()) return backend_->allgather_coalesced(c.output_lists, c.inputs, o);
        return backend_->allgather_into_tensor_coalesced(c.outputs, c.inputs, o);
      }
      case OpType::GATHER: {
        c10d::GatherOptions o;
        o.rootRank = c.peer;
        o.timeout = c.timeout;
        return backend_->gather(c.output_lists, c.inputs, o);
      }
      case OpType::SCATTER: {
        c10d::ScatterOptions o;
        o.rootRank = c.peer;
        o.timeout = c.timeout;
        return backend_->scatter(c.outputs, c.input_lists, o);
      }
      case OpType::REDUCE_SCATTER: {
        c10d::ReduceScatterOptions o;
        o.reduceOp = c.reduce_op;
        o.timeout = c.timeout;
        return backend_->reduce_scatter(c.outputs, c.input_lists, o);
      }
      case OpType::_REDUCE_SCATTER_BASE: {
        c10d::ReduceScatterOptions o;
        o.reduceOp = c.reduce_op;
        o.timeout = c.timeout;
        at::Tensor out = c.outputs[0].view(-1), in = c.inputs[0].view(-1);
        return backend_->_reduce_scatter_base(out, in, o);
      }
      case OpType::REDUCE_SCATTER_TENSOR_COALESCED: {
        c10d::ReduceScatterOptions o;
        o.reduceOp = c.reduce_op;
        o.timeout = c.timeout;
        return backend_->reduce_scatter_tensor_coalesced(c.outputs, c.inputs, o);
      }
      case OpType::ALLTOALL_BASE: {
        c10d::AllToAllOptions o;
        o.timeout = c.timeout;
        return backend_->alltoall_base(c.outputs[0], c.inputs[0], c.output_splits, c.input_splits, o);
      }
      case OpType::ALLTOALL: {
        c10d::AllToAllOptions o;
        o.timeout = c.timeout;
        return backend_->alltoall(c.outputs, c.inputs, o);
      }
      case OpType::SEND:
        return backend_->send(c.inputs, static_cast<int>(c.peer), c.tag);
      case OpType::RECV:
        return backend_->recv(c.inputs, static_cast<int>(c.peer), c.tag);
      case OpType::RECVANYSOURCE:
        return backend_->recvAnysource(c.inputs, c.tag);
      case OpType::BARRIER: {
        c10d::BarrierOptions o;
        o.timeout = c.timeout;
        return backend_->barrier(o);
      }
      default:
        FC_CHECK(false, c.name, "op type ", c10d::opTypeToString(c.type), " cannot be delegated");
    }
  }

  std::string name_;
  c10::DeviceType device_;
  c10::intrusive_ptr<c10d::Backend> backend_;
};

}  // namespace

std::unique_ptr<Algorithm> make_delegated(
    std::string name,
    c10::DeviceType device,
    c10::intrusive_ptr<c10d::Backend> backend) {
  return std::make_unique<Delegated>(std::move(name), device, std::move(backend));
}

}  // namespace fastcomm
