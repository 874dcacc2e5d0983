#include "kernels/cpu/reduce.h"

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
    const uint32_t bits = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
  // Round to nearest even, NaN -> 0x7FC0: the same bits as c10::BFloat16(float).
  static FASTCOMM_INLINE uint16_t store(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    return f != f ? static_cast<uint16_t>(0x7FC0) : static_cast<uint16_t>(rounded);
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
// float16 for the x86-64-v3/v4 kernels: GCC 12 does not vectorize _Float16
// conversions, so whole blocks are converted with F16C, 8 elements at a time.
__attribute__((target("arch=x86-64-v3"))) void half_block_to_float(const _Float16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

__attribute__((target("arch=x86-64-v3"))) void float_block_to_half(const float* src, _Float16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) dst[i] = static_cast<_Float16>(src[i]);
}

struct HalfFloatF16c : HalfFloat {
  static constexpr bool kBlockConversion = true;
  static void load_block(const _Float16* src, float* dst, int64_t n) {
    half_block_to_float(src, dst, n);
  }
  static void store_block(const float* src, _Float16* dst, int64_t n) {
    float_block_to_half(src, dst, n);
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

// Blocks of kBlock elements stay in an L1-resident accumulator while every
// source is folded in, in source order.
template <typename Conv, typename Op>
FASTCOMM_INLINE void reduce_loop(const void* const* srcs, int n, void* dst, int64_t count) {
  using S = typename Conv::Stored;
  using A = typename Conv::Acc;
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

#define FASTCOMM_DTYPE_KERNELS(SUFFIX, TARGET, HALF)                                                         \
  TARGET void f32_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {                 \
    arithmetic<Same<float>>(op, s, n, d, c);                                                                 \
  }                                                                                                          \
  TARGET void f64_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {                 \
    arithmetic<Same<double>>(op, s, n, d, c);                                                                \
  }                                                                                                          \
  TARGET void bf16_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {                \
    arithmetic<BFloat16Bits>(op, s, n, d, c);                                                                \
  }                                                                                                          \
  TARGET void f16_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {                 \
    arithmetic<HALF>(op, s, n, d, c);                                                                        \
  }                                                                                                          \
  TARGET void i8_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {                  \
    integral<Same<int8_t>>(op, s, n, d, c);                                                                  \
  }                                                                                                          \
  TARGET void u8_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {                  \
    integral<Same<uint8_t>>(op, s, n, d, c);                                                                 \
  }                                                                                                          \
  TARGET void i32_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {                 \
    integral<Same<int32_t>>(op, s, n, d, c);                                                                 \
  }                                                                                                          \
  TARGET void i64_##SUFFIX(ReduceKind op, const void* const* s, int n, void* d, int64_t c) {                 \
    integral<Same<int64_t>>(op, s, n, d, c);                                                                 \
  }                                                                                                          \
  constexpr DtypeKernels kernels_##SUFFIX{f32_##SUFFIX, f64_##SUFFIX, bf16_##SUFFIX, f16_##SUFFIX,            \
                                          i8_##SUFFIX,  u8_##SUFFIX,  i32_##SUFFIX,  i64_##SUFFIX};

FASTCOMM_DTYPE_KERNELS(baseline, , HalfFloat)
#if FASTCOMM_X86_DISPATCH
FASTCOMM_DTYPE_KERNELS(avx2, __attribute__((target("arch=x86-64-v3"))), HalfFloatF16c)
FASTCOMM_DTYPE_KERNELS(avx512, __attribute__((target("arch=x86-64-v4"))), HalfFloatF16c)
#endif

const DtypeKernels* kernels_for(ReduceIsa isa) {
  switch (isa) {
#if FASTCOMM_X86_DISPATCH
    case ReduceIsa::Avx512:
      return __builtin_cpu_supports("x86-64-v4") ? &kernels_avx512 : nullptr;
    case ReduceIsa::Avx2:
      return __builtin_cpu_supports("x86-64-v3") ? &kernels_avx2 : nullptr;
#endif
    case ReduceIsa::Baseline:
      return &kernels_baseline;
    default:
      return nullptr;
  }
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

bool is_bitwise(ReduceKind op) {
  return op == ReduceKind::BitAnd || op == ReduceKind::BitOr || op == ReduceKind::BitXor;
}

}  // namespace

bool reduce_supported(c10::ScalarType dtype, ReduceKind op) {
  switch (dtype) {
    case c10::kFloat:
    case c10::kDouble:
    case c10::kBFloat16:
    case c10::kHalf:
      return !is_bitwise(op);
    case c10::kChar:
    case c10::kByte:
    case c10::kInt:
    case c10::kLong:
      return true;
    default:
      return false;
  }
}

ReduceIsa best_reduce_isa() {
  static const ReduceIsa best = kernels_for(ReduceIsa::Avx512) ? ReduceIsa::Avx512
                                : kernels_for(ReduceIsa::Avx2) ? ReduceIsa::Avx2
                                                               : ReduceIsa::Baseline;
  return best;
}

bool reduce_isa_available(ReduceIsa isa) {
  return kernels_for(isa) != nullptr;
}

const char* reduce_isa_name(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::Avx512:
      return "avx512";
    case ReduceIsa::Avx2:
      return "avx2";
    default:
      return "baseline";
  }
}

void reduce_with(ReduceIsa isa, c10::ScalarType dtype, ReduceKind op, const void* const* srcs, int n, void* dst,
                 int64_t count) {
  TORCH_CHECK(reduce_supported(dtype, op), "fastcomm reduce: dtype ", dtype, " with op ", static_cast<int>(op),
              " is not supported");
  TORCH_CHECK(n >= 1, "fastcomm reduce: needs at least one source, got ", n);
  const DtypeKernels* kernels = kernels_for(isa);
  TORCH_CHECK(kernels, "fastcomm reduce: this CPU cannot run the ", reduce_isa_name(isa), " kernels");
  if (count > 0) pick(*kernels, dtype)(op, srcs, n, dst, count);
}

void reduce(c10::ScalarType dtype, ReduceKind op, const void* const* srcs, int n, void* dst, int64_t count) {
  static const DtypeKernels* best = kernels_for(best_reduce_isa());
  if (count <= 0) return;
  ReduceFn fn = pick(*best, dtype);
  TORCH_CHECK(fn && reduce_supported(dtype, op), "fastcomm reduce: dtype ", dtype, " with op ",
              static_cast<int>(op), " is not supported");
  fn(op, srcs, n, dst, count);
}

}  // namespace fastcomm::kernels
