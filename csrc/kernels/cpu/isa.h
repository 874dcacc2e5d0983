// The one instruction-set picker of the CPU kernels.
//
// Every vectorised kernel family (reductions, float16/bfloat16 conversions,
// int8, PowerSGD; sign has no vector variant yet) is compiled for several
// x86-64 levels with GCC target attributes, and asks here on every call which
// level to run: the best one
// this CPU supports, capped by set_isa_cap(). Tests lower the cap to run each
// family's baseline code (and every level in between) on any machine, so the
// code CI never picks by itself is still checked there. Other architectures
// compile and run the baseline only.
//
// Thread-safety: the cap is one atomic; lowering it while kernels run on other
// threads only changes which (bitwise-equivalent or tested) variant later
// calls take.
#pragma once

namespace fastcomm::kernels {

enum class Isa {
  Baseline = 0,  // x86-64 (SSE2), or any other architecture
  Avx2 = 1,      // x86-64-v3: AVX2, FMA, F16C
  Avx512 = 2,    // x86-64-v4: AVX-512 F/BW/DQ/VL
};

bool isa_supported(Isa isa);  // this CPU can run `isa`'s code
Isa best_isa();               // the best level this CPU supports
Isa active_isa();             // what the kernels use now: min(best_isa(), cap)
void set_isa_cap(Isa cap);    // process-wide; Isa::Avx512 (the default) means no cap

// True when kernels may use `level`'s code now.
inline bool isa_enabled(Isa level) {
  return static_cast<int>(active_isa()) >= static_cast<int>(level);
}

}  // namespace fastcomm::kernels
