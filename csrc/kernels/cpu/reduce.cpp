#include "kernels/cpu/reduce.h"

#include "kernels/cpu/half_conversions.h"
#include "kernels/cpu/isa.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include <c10/util/Exception.h>

namespace fastcomm::kernels {

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#define FASTCOMM_X86_DISPATCH 1
#else
#define FASTCOMM_X86_DISPATCH 0
#endif
#define FASTCOMM_INLINE inline __attribute__((always_inline))
#if FASTCOMM_X86_DISPATCH
#include <immintrin.h>
#endif

// How a stored element becomes an accumulator value and back.
template <typename T>
struct Same {
  using Stored = T;
  using Acc = T;
  static FASTCOMM_INLINE Acc load(T v) {
    return v;
  }
  static FASTCOMM_INLINE T store(Acc a) {
    return a;
  }
};

struct BFloat16Bits {
  using Stored = uint16_t;
  using Acc = float;
  static FASTCOMM_INLINE float load(uint16_t v) {
    return bfloat16_bits_to_float(v);
  }
  static FASTCOMM_INLINE uint16_t store(float f) {
    return float_to_bfloat16_bits(f);
  }
};

struct HalfFloat {
  using Stored = _Float16;
  using Acc = float;
  static FASTCOMM_INLINE float load(_Float16 v) {
    return static_cast<float>(v);
  }
  static FASTCOMM_INLINE _Float16 store(float f) {
    return static_cast<_Float16>(f);
  }
};

#if FASTCOMM_X86_DISPATCH
// float16 for the x86-64-v3/v4 kernels: whole blocks converted with F16C.
struct HalfFloatF16c : HalfFloat {
  static constexpr bool kBlockConversion = true;
  static void load_block(const _Float16* src, float* dst, int64_t n) {
    half_block_to_float_f16c(src, dst, n);
  }
  static void store_block(const float* src, _Float16* dst, int64_t n) {
    float_block_to_half_f16c(src, dst, n);
  }
};
#endif

// Whether Conv converts whole blocks (load_block/store_block) instead of elements.
template <typename Conv, typename = void>
struct HasBlockConversion : std::false_type {};
template <typename Conv>
struct HasBlockConversion<Conv, std::void_t<decltype(Conv::kBlockConversion)>> : std::true_type {};

struct SumOp {
  template <typename A>
  static FASTCOMM_INLINE A apply(A a, A b) {
    return a + b;
  }
};
struct ProductOp {
  template <typename A>
  static FASTCOMM_INLINE A apply(A a, A b) {
    return a * b;
  }
};
// NaN-propagating like torch.minimum/maximum; for integers the NaN tests fold away.
struct MinOp {
  template <typename A>
  static FASTCOMM_INLINE A apply(A a, A b) {
    return a != a ? a : (b != b ? b : (b < a ? b : a));
  }
};
struct MaxOp {
  template <typename A>
  static FASTCOMM_INLINE A apply(A a, A b) {
    return a != a ? a : (b != b ? b : (b > a ? b : a));
  }
};
struct BitAndOp {
  template <typename A>
  static FASTCOMM_INLINE A apply(A a, A b) {
    return a & b;
  }
};
struct BitOrOp {
  template <typename A>
  static FASTCOMM_INLINE A apply(A a, A b) {
    return a | b;
  }
};
struct BitXorOp {
  template <typename A>
  static FASTCOMM_INLINE A apply(A a, A b) {
    return a ^ b;
  }
};

// Two to eight sources: one pass that loads each element of every source,
// folds them in source order and stores the result once. It beats the
// accumulator below in L2 (no extra L1 passes) and from memory (the
// accumulator reads each 4 KiB page of every source cold, one source at a
// time): pytest benchmarks/kernels/test_reductions.py, and whole all_reduces
// in benchmarks/peers/run.py (docs/algorithms.md "Reductions"). ivdep: dst may be
// one of the sources, element for element, which carries nothing from one
// iteration to the next; without it GCC vectorizes only behind an overlap
// test that fails in exactly that case.
template <typename Conv, typename Op, int N>
FASTCOMM_INLINE void reduce_direct(const void* const* srcs, void* dst, int64_t count) {
  using S = typename Conv::Stored;
  const S* s[N];
  for (int k = 0; k < N; ++k) s[k] = static_cast<const S*>(srcs[k]);
  S* out = static_cast<S*>(dst);
#pragma GCC ivdep
  for (int64_t j = 0; j < count; ++j) {
    auto acc = Conv::load(s[0][j]);
    for (int k = 1; k < N; ++k) acc = Op::apply(acc, Conv::load(s[k][j]));
    out[j] = Conv::store(acc);
  }
}

// The most sources reduce_direct takes for a dtype and op; 0: none. Min/max
// on floating types carry NaN tests that vectorize well there only for two
// sources of a type computed as stored (float32/float64); with more sources or
// bfloat16 the accumulator is faster (pytest benchmarks/kernels/test_reductions.py).
template <typename Conv, typename Op>
constexpr int direct_max_sources() {
  using A = typename Conv::Acc;
  if constexpr (HasBlockConversion<Conv>::value) {
    return 0;
  } else if constexpr ((std::is_same_v<Op, MinOp> || std::is_same_v<Op, MaxOp>) && !std::is_integral_v<A>) {
    return std::is_same_v<typename Conv::Stored, A> ? 2 : 0;
  } else {
    return 8;
  }
}

// More sources (and float16 with F16C, converted a block at a time): blocks
// of kBlock elements stay in an L1-resident accumulator while every source is
// folded in, in source order.
template <typename Conv, typename Op>
FASTCOMM_INLINE void reduce_loop(const void* const* srcs, int n, void* dst, int64_t count) {
  using S = typename Conv::Stored;
  using A = typename Conv::Acc;
  constexpr int kDirect = direct_max_sources<Conv, Op>();
  if constexpr (kDirect >= 2) {
    if (n == 2) return reduce_direct<Conv, Op, 2>(srcs, dst, count);
  }
  if constexpr (kDirect >= 8) {
    switch (n) {
      case 3:
        return reduce_direct<Conv, Op, 3>(srcs, dst, count);
      case 4:
        return reduce_direct<Conv, Op, 4>(srcs, dst, count);
      case 5:
        return reduce_direct<Conv, Op, 5>(srcs, dst, count);
      case 6:
        return reduce_direct<Conv, Op, 6>(srcs, dst, count);
      case 7:
        return reduce_direct<Conv, Op, 7>(srcs, dst, count);
      case 8:
        return reduce_direct<Conv, Op, 8>(srcs, dst, count);
      default:
        break;
    }
  }
  constexpr int64_t kBlock = 1024;
  A acc[kBlock];
  for (int64_t base = 0; base < count; base += kBlock) {
    const int64_t len = std::min(kBlock, count - base);
    const S* first = static_cast<const S*>(srcs[0]) + base;
    S* out = static_cast<S*>(dst) + base;
    if constexpr (HasBlockConversion<Conv>::value) {
      A converted[kBlock];
      Conv::load_block(first, acc, len);
      for (int s = 1; s < n; ++s) {
        Conv::load_block(static_cast<const S*>(srcs[s]) + base, converted, len);
        for (int64_t j = 0; j < len; ++j) acc[j] = Op::apply(acc[j], converted[j]);
      }
      Conv::store_block(acc, out, len);
      continue;
    }
    for (int64_t j = 0; j < len; ++j) acc[j] = Conv::load(first[j]);
    for (int s = 1; s < n; ++s) {
      const S* src = static_cast<const S*>(srcs[s]) + base;
      for (int64_t j = 0; j < len; ++j) acc[j] = Op::apply(acc[j], Conv::load(src[j]));
    }
    for (int64_t j = 0; j < len; ++j) out[j] = Conv::store(acc[j]);
  }
}

template <typename Conv>
FASTCOMM_INLINE void arithmetic(ReduceKind op, const void* const* srcs, int n, void* dst, int64_t count) {
  switch (op) {
    case ReduceKind::Sum:
      return reduce_loop<Conv, SumOp>(srcs, n, dst, count);
    case ReduceKind::Product:
      return reduce_loop<Conv, ProductOp>(srcs, n, dst, count);
    case ReduceKind::Min:
      return reduce_loop<Conv, MinOp>(srcs, n, dst, count);
    case ReduceKind::Max:
      return reduce_loop<Conv, MaxOp>(srcs, n, dst, count);
    default:
      TORCH_INTERNAL_ASSERT(false, "fastcomm reduce: bitwise op on a floating type");
  }
}

template <typename Conv>
FASTCOMM_INLINE void integral(ReduceKind op, const void* const* srcs, int n, void* dst, int64_t count) {
  switch (op) {
    case ReduceKind::BitAnd:
      return reduce_loop<Conv, BitAndOp>(srcs, n, dst, count);
    case ReduceKind::BitOr:
      return reduce_loop<Conv, BitOrOp>(srcs, n, dst, count);
    case ReduceKind::BitXor:
      return reduce_loop<Conv, BitXorOp>(srcs, n, dst, count);
    default:
      return arithmetic<Conv>(op, srcs, n, dst, count);
  }
}

// The per-dtype entry points, stamped out once per instruction set. The
// always_inline loops above are compiled inside each, for that target.
using ReduceFn = void (*)(ReduceKind, const void* const*, int, void*, int64_t);

struct DtypeKernels {
  ReduceFn f32, f64, bf16, f16, i8, u8, i32, i64;
};

#define FASTCOMM_DTYPE_KERNELS(SUFFIX, TARGET, HALF)                                               \
  TARGET void f32_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {       \
    arithmetic<Same<float>>(op, s, n, d, c);                                                       \
  }                                                                                                \
  TARGET void f64_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {       \
    arithmetic<Same<double>>(op, s, n, d, c);                                                      \
  }                                                                                                \
  TARGET void bf16_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {      \
    arithmetic<BFloat16Bits>(op, s, n, d, c);                                                      \
  }                                                                                                \
  TARGET void f16_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {       \
    arithmetic<HALF>(op, s, n, d, c);                                                              \
  }                                                                                                \
  TARGET void i8_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {        \
    integral<Same<int8_t>>(op, s, n, d, c);                                                        \
  }                                                                                                \
  TARGET void u8_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {        \
    integral<Same<uint8_t>>(op, s, n, d, c);                                                       \
  }                                                                                                \
  TARGET void i32_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {       \
    integral<Same<int32_t>>(op, s, n, d, c);                                                       \
  }                                                                                                \
  TARGET void i64_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {       \
    integral<Same<int64_t>>(op, s, n, d, c);                                                       \
  }                                                                                                \
  constexpr DtypeKernels kernels_##SUFFIX{f32_##SUFFIX, f64_##SUFFIX, bf16_##SUFFIX, f16_##SUFFIX, \
                                          i8_##SUFFIX,  u8_##SUFFIX,  i32_##SUFFIX,  i64_##SUFFIX};

FASTCOMM_DTYPE_KERNELS(baseline, , HalfFloat)
#if FASTCOMM_X86_DISPATCH
FASTCOMM_DTYPE_KERNELS(avx2, __attribute__((target("arch=x86-64-v3"))), HalfFloatF16c)
// AVX-512 instructions on 256-bit vectors (masked tails, more registers), never
// 512-bit ones: a core running 512-bit arithmetic changes its power state, and
// for a while everything on it runs slower. With 512-bit loops a mid-size
// all_reduce ran slower for its first ops after the ranks paused, and in
// stretches of long loops (the extra time showed in the process_vm_readv
// beside the sum). The sum is bound by memory, so the wider vector never
// pays. benchmarks/wide_vector_phases.c shows the effect without fastcomm
// (docs/algorithms.md "Reductions").
FASTCOMM_DTYPE_KERNELS(avx512, __attribute__((target("arch=x86-64-v4,prefer-vector-width=256"))), HalfFloatF16c)
#endif

const DtypeKernels& kernels_for(Isa isa) {
#if FASTCOMM_X86_DISPATCH
  if (isa == Isa::Avx512) return kernels_avx512;
  if (isa == Isa::Avx2) return kernels_avx2;
#endif
  return kernels_baseline;
}

ReduceFn pick(const DtypeKernels& k, c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
      return k.f32;
    case c10::kDouble:
      return k.f64;
    case c10::kBFloat16:
      return k.bf16;
    case c10::kHalf:
      return k.f16;
    case c10::kChar:
      return k.i8;
    case c10::kByte:
      return k.u8;
    case c10::kInt:
      return k.i32;
    case c10::kLong:
      return k.i64;
    default:
      return nullptr;
  }
}

}  // namespace

void reduce(c10::ScalarType dtype, ReduceKind op, const void* const* srcs, int n, void* dst, int64_t count) {
  TORCH_CHECK(cpu_kernels_reduce(dtype, op), "fastcomm reduce: dtype ", dtype, " with op ", static_cast<int>(op),
              " is not supported");
  TORCH_CHECK(n >= 1, "fastcomm reduce: needs at least one source, got ", n);
  if (count <= 0) return;
  pick(kernels_for(active_isa()), dtype)(op, srcs, n, dst, count);
}

}  // namespace fastcomm::kernels
