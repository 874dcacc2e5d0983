#include "kernels/cpu/isa.h"

#include <atomic>

namespace fastcomm::kernels {

namespace {

std::atomic<int> cap_{static_cast<int>(Isa::Avx512)};

}  // namespace

bool isa_supported(Isa isa) {
  switch (isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    case Isa::Avx512:
      return __builtin_cpu_supports("x86-64-v4");
    case Isa::Avx2:
      return __builtin_cpu_supports("x86-64-v3");
#endif
    case Isa::Baseline:
      return true;
    default:
      return false;
  }
}

Isa best_isa() {
  static const Isa best = isa_supported(Isa::Avx512) ? Isa::Avx512
                          : isa_supported(Isa::Avx2) ? Isa::Avx2
                                                     : Isa::Baseline;
  return best;
}

Isa active_isa() {
  const int best = static_cast<int>(best_isa());
  const int cap = cap_.load(std::memory_order_relaxed);
  return static_cast<Isa>(cap < best ? cap : best);
}

void set_isa_cap(Isa cap) {
  cap_.store(static_cast<int>(cap), std::memory_order_relaxed);
}

}  // namespace fastcomm::kernels
