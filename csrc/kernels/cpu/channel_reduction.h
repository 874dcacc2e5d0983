// Parallel per-channel reductions over a fixed partition of a ChannelLayout's
// rows into blocks: each block yields a partial result per channel, and the
// caller combines partials in block order, so results are the same whatever
// the number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <ATen/Parallel.h>

#include "kernels/syncbn_math.h"

namespace fastcomm {
namespace syncbn {

struct RowBlocks {
  int64_t rows_per_block;
  int64_t count;

  int64_t begin(int64_t block) const {
    return block * rows_per_block;
  }
  int64_t end(int64_t block, int64_t rows) const {
    return std::min(rows, (block + 1) * rows_per_block);
  }
};

// Blocks of at least kMinElements elements (threads are not worth waking for
// less), at most kMaxBlocks of them (bounds the partials' memory).
inline RowBlocks split_rows(const ChannelLayout& layout) {
  constexpr int64_t kMinElements = 1 << 16;
  constexpr int64_t kMaxBlocks = 64;
  const int64_t row_elements = std::max<int64_t>(1, layout.channels * layout.inner);
  int64_t per_block = std::max<int64_t>(1, kMinElements / row_elements);
  per_block = std::max(per_block, (layout.rows + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t count = layout.rows == 0 ? 0 : (layout.rows + per_block - 1) / per_block;
  return {per_block, count};
}

// Partials of a per-channel reduction: result[b * C + c] is block b's partial
// for channel c. In the NC*-contiguous layout tasks are (block, channel) pairs
// and `planes(c, row_begin, row_end)` returns one partial; in the channels-last
// layout (inner == 1) tasks are blocks and `rows(row_begin, row_end, out)`
// accumulates into out[0..C) (value-initialized).
template <typename Partial, typename PlanesFn, typename RowsFn>
std::vector<Partial> reduce_row_blocks(const ChannelLayout& layout, const RowBlocks& blocks, PlanesFn planes,
                                       RowsFn rows) {
  const int64_t channels = layout.channels;
  std::vector<Partial> partials(static_cast<size_t>(blocks.count * channels));
  if (layout.inner == 1) {
    at::parallel_for(0, blocks.count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) rows(blocks.begin(b), blocks.end(b, layout.rows), &partials[b * channels]);
    });
    return partials;
  }
  // A grain of whole tasks worth about 32K elements.
  const int64_t task_elements = std::max<int64_t>(1, blocks.rows_per_block * layout.inner);
  const int64_t grain = std::max<int64_t>(1, (1 << 15) / task_elements);
  at::parallel_for(0, blocks.count * channels, grain, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / channels;
      partials[task] = planes(task % channels, blocks.begin(b), blocks.end(b, layout.rows));
    }
  });
  return partials;
}

}  // namespace syncbn
}  // namespace fastcomm
