// Wire formats of fastcomm's compressed gradients, shared by the CPU and CUDA
// kernels and by fastcomm/hooks (which allocates the payloads from these sizes).
//
// Every rank's payload for a bucket has the same size, so the payloads of all
// ranks travel in one all_gather into a [world, bytes] buffer and are
// decompressed and summed in rank order (bitwise the same result on every rank).
// Byte payloads are padded to a multiple of 4 bytes, so every rank's row of
// the gathered buffer starts 4-byte aligned (its float32 scales too).
// Torch-free: included by .cu files.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace fastcomm {
namespace compress {

// int8 blockwise: [num_blocks float32 scales][count int8 values][0-3 zero bytes]. Block b covers
// elements [b*block, min((b+1)*block, count)); value = q * scale[b], with
// scale = max|x| / 127 over the block and q in [-127, 127]. Scales come first
// so they stay 4-byte aligned.
FASTCOMM_HOST_DEVICE inline int64_t int8_num_blocks(int64_t count, int64_t block) {
  return (count + block - 1) / block;
}
FASTCOMM_HOST_DEVICE inline int64_t padded_to_words(int64_t bytes) {
  return (bytes + 3) / 4 * 4;
}
FASTCOMM_HOST_DEVICE inline int64_t int8_payload_bytes(int64_t count, int64_t block) {
  return padded_to_words(4 * int8_num_blocks(count, block) + count);
}

// Sign: [float32 scale][ceil(count / 8) bytes][0-3 zero bytes]. Bit (j % 8) of byte j / 8 is 1
// when element j is >= 0 (decoded as +scale), 0 when negative (-scale). The
// scale is mean |x| over the bucket (EF-SignSGD, Karimireddy et al. 2019).
FASTCOMM_HOST_DEVICE inline int64_t sign_payload_bytes(int64_t count) {
  return padded_to_words(4 + (count + 7) / 8);
}
constexpr int kInt8Max = 127;

// Top-k: 2k int32 words, [k float32 values (their bits)][k int32 indices], the
// indices ascending and distinct.
FASTCOMM_HOST_DEVICE inline int64_t topk_payload_words(int64_t k) {
  return 2 * k;
}

// Stochastic rounding: a uniform number in [0, 1) per (seed, element), from a
// counter-based hash (murmur3's 32-bit finalizer), so CPU and CUDA kernels draw
// the same numbers in any thread order. 32-bit arithmetic: cheap on every
// instruction set. 24 bits: exact in float32.
FASTCOMM_HOST_DEVICE inline float uniform_from_hash(uint64_t seed, uint64_t index) {
  uint32_t z = static_cast<uint32_t>(index) * 0x9E3779B9u + static_cast<uint32_t>(seed) +
               static_cast<uint32_t>(seed >> 32) * 0x85EBCA6Bu;
  z ^= z >> 16;
  z *= 0x85EBCA6Bu;
  z ^= z >> 13;
  z *= 0xC2B2AE35u;
  z ^= z >> 16;
  return static_cast<float>(z >> 8) * (1.0f / 16777216.0f);
}

}  // namespace compress
}  // namespace fastcomm
