// alias_staging: runs a collective whose inputs overlap its outputs.
//
// The algorithms read a rank's inputs while they write its outputs, in an
// order of their own (a peer's block may land in the output before this rank
// has read its input), so an input that shares bytes with an output would be
// read after being overwritten on some paths and not on others. Every
// algorithm below this one may assume inputs and outputs do not overlap,
// except in the in-place forms torch and FSDP use, which they all handle: an
// all_gather whose input is exactly this rank's block of the output, a
// reduce_scatter whose output is exactly this rank's block of the input, a
// gather/scatter whose root passes its own block. Any other overlap is staged
// here: the overlapping inputs are copied first, then the collective runs on
// the copies. Extra memory traffic: one read and one write of each such input.
//
// Outputs that overlap one another have no single correct result (which
// rank's block wins?): validation refuses them (backend/validation.cpp).
#include "algorithms/dispatcher.h"
#include "algorithms/registry.h"

namespace fastcomm {

namespace {

using c10d::OpType;

bool overlap(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  if (!a.storage().is_alias_of(b.storage())) return false;
  const auto* a0 = static_cast<const char*>(a.data_ptr());
  const auto* b0 = static_cast<const char*>(b.data_ptr());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// `part` is exactly block `index` of `whole` (whole holds equal blocks of part's size).
bool is_block(const at::Tensor& part, const at::Tensor& whole, int64_t index) {
  return part.defined() && whole.defined() && part.storage().is_alias_of(whole.storage()) &&
         static_cast<const char*>(part.data_ptr()) ==
             static_cast<const char*>(whole.data_ptr()) + index * static_cast<int64_t>(part.nbytes());
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.data_ptr() == b.data_ptr() && a.nbytes() == b.nbytes();
}

// The in-place form of `c` that every algorithm handles (see above), on `rank`.
bool standard_in_place(const Collective& c, int rank) {
  switch (c.type) {
    case OpType::_ALLGATHER_BASE:
      return is_block(c.inputs[0], c.outputs[0], rank);
    case OpType::ALLGATHER:
    case OpType::GATHER:
      return !c.output_lists.empty() && same_bytes(c.inputs[0], c.output_lists[0][rank]);
    case OpType::ALLGATHER_COALESCED:
      if (!c.output_lists.empty()) return false;
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        if (!is_block(c.inputs[i], c.outputs[i], rank)) return false;
      }
      return true;
    case OpType::_REDUCE_SCATTER_BASE:
      return is_block(c.outputs[0], c.inputs[0], rank);
    case OpType::REDUCE_SCATTER:
    case OpType::SCATTER:
      return !c.input_lists.empty() && same_bytes(c.outputs[0], c.input_lists[0][rank]);
    case kReduceScatterTensorCoalesced:
      for (size_t i = 0; i < c.outputs.size(); ++i) {
        if (!is_block(c.outputs[i], c.inputs[i], rank)) return false;
      }
      return true;
    default:
      return false;
  }
}

// Calls f(input) for every tensor the op reads (inputs and input lists).
template <class C, class F>
void for_each_read(C& c, F&& f) {
  for (auto& t : c.inputs) f(t);
  for (auto& list : c.input_lists) {
    for (auto& t : list) f(t);
  }
}

class AliasStaging final : public Algorithm {
 public:
  explicit AliasStaging(int rank) : rank_(rank) {}

  const char* name() const override {
    return "alias_staging";
  }

  bool accepts(const Collective& c) const override {
    if (c.is_p2p() || c.is_in_place()) return false;
    if (c.inputs.size() == 1 && c.outputs.size() == 1 && c.input_lists.empty() && c.output_lists.empty()) {
      // One tensor each way (the tensor forms of all_gather, reduce_scatter, all_to_all): no vectors built.
      return overlap(c.inputs[0], c.outputs[0]) && !standard_in_place(c, rank_);
    }
    const std::vector<at::Tensor> written = c.written_tensors();
    bool overlapping = false;
    for_each_read(c, [&](const at::Tensor& in) {
      for (const auto& out : written) overlapping = overlapping || overlap(in, out);
    });
    return overlapping && !standard_in_place(c, rank_);
  }

  Launched launch(Collective& c, Dispatcher& dispatcher) override {
    Collective staged = c;
    const std::vector<at::Tensor> written = c.written_tensors();
    for_each_read(staged, [&](at::Tensor& in) {
      for (const auto& out : written) {
        if (overlap(in, out)) {
          in = in.clone();
          break;
        }
      }
    });
    return dispatcher.launch(staged);  // the outputs are the caller's own: nothing to copy back
  }

 private:
  int rank_;
};

}  // namespace

std::unique_ptr<Algorithm> make_alias_staging(int rank) {
  return std::make_unique<AliasStaging>(rank);
}

}  // namespace fastcomm
