#include "algorithms/delegated.h"

#include "core/errors.h"
#include "core/names.h"
#include "transport/shm/engine.h"

namespace fastcomm {

c10::intrusive_ptr<c10d::Work> call_backend(c10d::Backend& backend, Collective& c) {
  using c10d::OpType;
  switch (c.type) {
    case OpType::BROADCAST: {
      c10d::BroadcastOptions o;
      o.rootRank = c.peer;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.broadcast(c.inputs, o);
    }
    case OpType::ALLREDUCE: {
      c10d::AllreduceOptions o;
      o.reduceOp = c.reduce_op;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.allreduce(c.inputs, o);
    }
    case OpType::ALLREDUCE_COALESCED: {
      c10d::AllreduceCoalescedOptions o;
      o.reduceOp = c.reduce_op;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.allreduce_coalesced(c.inputs, o);
    }
    case OpType::REDUCE: {
      c10d::ReduceOptions o;
      o.reduceOp = c.reduce_op;
      o.rootRank = c.peer;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.reduce(c.inputs, o);
    }
    case OpType::ALLGATHER: {
      c10d::AllgatherOptions o;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.allgather(c.output_lists, c.inputs, o);
    }
    case OpType::_ALLGATHER_BASE: {
      c10d::AllgatherOptions o;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      // Flat views: Gloo insists the output be (world_size * dim0, ...) shaped;
      // fastcomm also accepts (world_size, *input.shape) as NCCL does.
      at::Tensor out = c.outputs[0].view(-1), in = c.inputs[0].view(-1);
      return backend._allgather_base(out, in, o);
    }
    case OpType::ALLGATHER_COALESCED: {
      c10d::AllgatherOptions o;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      if (!c.output_lists.empty()) return backend.allgather_coalesced(c.output_lists, c.inputs, o);
      return backend.allgather_into_tensor_coalesced(c.outputs, c.inputs, o);
    }
    case OpType::GATHER: {
      c10d::GatherOptions o;
      o.rootRank = c.peer;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.gather(c.output_lists, c.inputs, o);
    }
    case OpType::SCATTER: {
      c10d::ScatterOptions o;
      o.rootRank = c.peer;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.scatter(c.outputs, c.input_lists, o);
    }
    case OpType::REDUCE_SCATTER: {
      c10d::ReduceScatterOptions o;
      o.reduceOp = c.reduce_op;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.reduce_scatter(c.outputs, c.input_lists, o);
    }
    case OpType::_REDUCE_SCATTER_BASE: {
      c10d::ReduceScatterOptions o;
      o.reduceOp = c.reduce_op;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      at::Tensor out = c.outputs[0].view(-1), in = c.inputs[0].view(-1);
      return backend._reduce_scatter_base(out, in, o);
    }
    case kReduceScatterTensorCoalesced: {
      c10d::ReduceScatterOptions o;
      o.reduceOp = c.reduce_op;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.reduce_scatter_tensor_coalesced(c.outputs, c.inputs, o);
    }
    case OpType::ALLTOALL_BASE: {
      c10d::AllToAllOptions o;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.alltoall_base(c.outputs[0], c.inputs[0], c.output_splits, c.input_splits, o);
    }
    case OpType::ALLTOALL: {
      c10d::AllToAllOptions o;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.alltoall(c.outputs, c.inputs, o);
    }
    case OpType::SEND:
      return backend.send(c.inputs, static_cast<int>(c.peer), c.tag);
    case OpType::RECV:
      return backend.recv(c.inputs, static_cast<int>(c.peer), c.tag);
    case OpType::RECVANYSOURCE:
      return backend.recvAnysource(c.inputs, c.tag);
    case OpType::BARRIER: {
      c10d::BarrierOptions o;
      o.timeout = c.timeout;
      o.asyncOp = !c.blocking;
      return backend.barrier(o);
    }
    default:
      FC_CHECK(false, c.name, "op type ", op_type_name(static_cast<int>(c.type)), " cannot be delegated");
  }
}

Launched delegate(c10d::Backend& backend, Collective& c) {
  c10::intrusive_ptr<c10d::Work> work = call_backend(backend, c);
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

namespace {

class Delegated final : public Algorithm {
 public:
  Delegated(std::string name, c10::DeviceType device, c10::intrusive_ptr<c10d::Backend> backend,
            std::shared_ptr<CallCheck> check)
      : name_(std::move(name)),
        device_(device),
        backend_(std::move(backend)),
        check_(std::move(check)),
        protocol_(shm::protocol_code(name_.c_str())) {}

  const char* name() const override {
    return name_.c_str();
  }

  bool accepts(const Collective& c) const override {
    return backend_ && c.device == device_;
  }

  Launched launch(Collective& c, Dispatcher&) override {
    if (!check_ || c.is_p2p()) return delegate(*backend_, c);
    return check_->run(c, protocol_, [backend = backend_, c]() mutable { return delegate(*backend, c); });
  }

 private:
  std::string name_;
  c10::DeviceType device_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::shared_ptr<CallCheck> check_;  // null: calls go to the backend unchecked
  uint16_t protocol_;                 // shm::protocol_code(name_), for the check
};

}  // namespace

std::unique_ptr<Algorithm> make_delegated(std::string name, c10::DeviceType device,
                                          c10::intrusive_ptr<c10d::Backend> backend, std::shared_ptr<CallCheck> check) {
  return std::make_unique<Delegated>(std::move(name), device, std::move(backend), std::move(check));
}

}  // namespace fastcomm
