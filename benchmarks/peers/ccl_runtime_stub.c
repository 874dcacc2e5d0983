/* The four Intel-compiler runtime symbols libccl.so.1 (oneccl-cpu) takes from
   "libccl.so.2", a library its wheel does not ship: plain libc stand-ins. */
#include <stdint.h>
#include <string.h>
uint64_t __intel_cpu_feature_indicator_x[2] = {1, 0}; /* bit 0: "initialised", no optional features */
void __intel_cpu_features_init_x(void) {}
void *_intel_fast_memcpy(void *dst, const void *src, size_t n) { return memcpy(dst, src, n); }
void *_intel_fast_memset(void *dst, int c, size_t n) { return memset(dst, c, n); }
