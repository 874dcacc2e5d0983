// What differs between the torch versions fastcomm builds against: CI builds
// with torch 2.13 (CPU) and 2.14 (CUDA); the GPU machines it is checked on run
// torch 2.11, which cannot be upgraded there. Each difference is decided here
// only, by torch's own version macros.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/headeronly/version.h>

namespace fastcomm {

#define FASTCOMM_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// The op type of reduce_scatter_tensor_coalesced. torch 2.11's c10d::OpType has
// no name for it (Backend::reduce_scatter_tensor_coalesced exists); fastcomm
// then uses the value later versions give it, unused by 2.11's enum.
#if FASTCOMM_TORCH_AT_LEAST(2, 13)
constexpr c10d::OpType kReduceScatterTensorCoalesced = c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED;
#else
constexpr c10d::OpType kReduceScatterTensorCoalesced = static_cast<c10d::OpType>(19);
static_assert(c10d::OpType::_ALLREDUCE_SPARSE == static_cast<c10d::OpType>(18),
              "fastcomm: kReduceScatterTensorCoalesced's value must follow c10d::OpType's last value");
#endif

}  // namespace fastcomm
