// Multi-tensor scaled copy: many tensors into one flat buffer (pack) or back
// (unpack), dtype conversion, the scale and a magnitude limit fused into the
// one pass. The fp16 and bf16 hooks use it to compress (with the limit that
// keeps a float16 sum finite) and to decompress.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/compress_cpu.h"
#include "kernels/cpu/compress_elements.h"

namespace fastcomm {
namespace compress {

namespace {

template <typename Src, typename Dst>
int64_t copy_scaled(const Src* src, Dst* dst, int64_t count, double scale, double limit) {
  using A = std::conditional_t<std::is_same_v<Src, double> || std::is_same_v<Dst, double>, double, float>;
  const A s = static_cast<A>(scale);
  if (std::isinf(limit)) {
    for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<Dst>(static_cast<A>(src[i]) * s);
    return 0;
  }
  const A bound = static_cast<A>(limit);
  int64_t clamped = 0;
  for (int64_t i = 0; i < count; ++i) {
    A v = static_cast<A>(src[i]) * s;
    const A mag = std::abs(v);
    const bool over = mag > bound && mag <= std::numeric_limits<A>::max();  // inf and NaN pass
    clamped += over;
    v = over ? std::copysign(bound, v) : v;
    dst[i] = static_cast<Dst>(v);
  }
  return clamped;
}

int64_t copy_piece(const ScaledCopy& p, int64_t begin, int64_t end, double scale, double limit) {
  int64_t clamped = 0;
  FASTCOMM_DISPATCH_GRAD_TYPES(p.src_dtype, "multi_tensor_pack", [&] {
    using Src = scalar_t;
    FASTCOMM_DISPATCH_GRAD_TYPES(p.dst_dtype, "multi_tensor_pack", [&] {
      clamped = copy_scaled(static_cast<const Src*>(p.src) + begin, static_cast<scalar_t*>(p.dst) + begin,
                            end - begin, scale, limit);
    });
  });
  return clamped;
}

}  // namespace

int64_t scaled_copy_cpu(const std::vector<ScaledCopy>& pieces, double scale, double limit) {
  // Tasks of at most kGrain elements across all pieces, so one large tensor
  // and many small ones spread over the threads alike.
  struct Task {
    size_t piece;
    int64_t begin, end;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (int64_t b = 0; b < pieces[i].count; b += kGrain) tasks.push_back({i, b, std::min(pieces[i].count, b + kGrain)});
  }
  std::vector<int64_t> clamped(tasks.size(), 0);
  at::parallel_for(0, static_cast<int64_t>(tasks.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) clamped[t] = copy_piece(pieces[tasks[t].piece], tasks[t].begin, tasks[t].end, scale, limit);
  });
  int64_t total = 0;
  for (int64_t c : clamped) total += c;
  return total;
}

}  // namespace compress
}  // namespace fastcomm
