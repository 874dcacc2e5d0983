// Why fastcomm's reductions use 256-bit vectors: a reproducer without fastcomm
// (docs/algorithms.md "Reductions", csrc/kernels/cpu/reduce.cpp).
//
// Two processes, pinned to CPUs 0 and 1, run the steps of fastcomm's 2-rank
// single-copy all_reduce (algorithms/shm_single_copy.cpp) in C: barrier; read
// the half this rank owns from the peer's tensor (process_vm_readv); add it to
// its own with 256-bit (ymm) or 512-bit (zmm) vectors; write the sum back into
// the peer's tensor (process_vm_writev); barrier. Every 2000 ops both ranks
// sleep PAUSE_US microseconds (as between a benchmark's sizes, or a training
// step's data loading). Prints the median op (slowest rank) and, for the 1000
// ops after a pause, the median of each block of 50 (the median over pauses):
// with zmm the first blocks after a pause ran ~1.3x slower on the development
// machine (the core changes its power state around 512-bit arithmetic), with
// ymm they ran as fast as the rest.
//
//   cc -O3 -o /tmp/wide_vector_phases benchmarks/wide_vector_phases.c
//   /tmp/wide_vector_phases 65536 20000 zmm 50000    # bytes, ops, ymm|zmm, pause (us)
//
// x86-64 with AVX-512F, Linux, 2 CPUs, ptrace access to a child (Yama
// ptrace_scope 0 or 1). Not built or run by CI.
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kPauseEvery = 2000, kAfterPause = 1000, kBlock = 50 };

typedef struct {
  _Atomic long posted;
  long pid;
  long tensor;
  char pad[104];  // one rank per 128 bytes: no false sharing between the two
} Control;

// The same loop twice; GCC vectorizes each at the width its target prefers.
__attribute__((target("avx2"))) static void sum_ymm(float* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}
__attribute__((target("avx512f,prefer-vector-width=512"))) static void sum_zmm(float* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void barrier(Control* c, int rank, long* round) {
  ++*round;
  atomic_store(&c[rank].posted, *round);
  while (atomic_load(&c[1 - rank].posted) < *round) __builtin_ia32_pause();
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(const double* values, int n) {
  double* copy = malloc(sizeof(double) * n);
  memcpy(copy, values, sizeof(double) * n);
  qsort(copy, n, sizeof(double), by_value);
  const double m = copy[n / 2];
  free(copy);
  return m;
}

int main(int argc, char** argv) {
  if (argc != 5 || (strcmp(argv[3], "ymm") != 0 && strcmp(argv[3], "zmm") != 0)) {
    fprintf(stderr, "usage: %s BYTES OPS ymm|zmm PAUSE_US\n", argv[0]);
    return 2;
  }
  const size_t bytes = strtoul(argv[1], NULL, 10) / 8 * 8, half = bytes / 2;
  const int ops = atoi(argv[2]), zmm = strcmp(argv[3], "zmm") == 0, pause_us = atoi(argv[4]);
  if (bytes == 0 || ops < 2 * kPauseEvery) {
    fprintf(stderr, "need BYTES >= 8 and OPS >= %d\n", 2 * kPauseEvery);
    return 2;
  }
  if (!__builtin_cpu_supports("avx512f")) {
    fprintf(stderr, "this CPU has no AVX-512F\n");
    return 2;
  }
  Control* control = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  double* op_us = mmap(NULL, sizeof(double) * ops * 2, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (control == MAP_FAILED || op_us == MAP_FAILED) return 1;
  const pid_t child = fork();
  const int rank = child == 0 ? 1 : 0;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(rank, &cpus);
  sched_setaffinity(0, sizeof(cpus), &cpus);

  float* tensor = malloc(bytes);
  float* piece = malloc(1 << 20);  // as fastcomm: 1 MiB of pieces for 2 ranks (mmap-backed)
  const size_t count = bytes / sizeof(float);
  for (size_t i = 0; i < count; ++i) tensor[i] = 1.0f;
  control[rank].pid = getpid();
  control[rank].tensor = (long)tensor;
  long round = 0;
  barrier(control, rank, &round);
  const pid_t peer = (pid_t)control[1 - rank].pid;
  char* peer_half = (char*)control[1 - rank].tensor + rank * half;
  float* own_half = (float*)((char*)tensor + rank * half);

  for (int op = 0; op < ops; ++op) {
    if (op > 0 && op % kPauseEvery == 0) usleep(pause_us);
    barrier(control, rank, &round);
    const double start = now_us();
    struct iovec local = {piece, half}, remote = {peer_half, half};
    if (process_vm_readv(peer, &local, 1, &remote, 1, 0) != (ssize_t)half) {
      perror("process_vm_readv");
      return 1;
    }
    (zmm ? sum_zmm : sum_ymm)(own_half, piece, half / sizeof(float));
    if (own_half[0] > 1e30f) {  // keep the sums finite over many ops
      for (size_t i = 0; i < count; ++i) tensor[i] = 1.0f;
    }
    struct iovec result = {own_half, half};
    if (process_vm_writev(peer, &result, 1, &remote, 1, 0) != (ssize_t)half) {
      perror("process_vm_writev");
      return 1;
    }
    barrier(control, rank, &round);
    op_us[rank * ops + op] = now_us() - start;
  }
  if (rank == 1) _exit(0);
  waitpid(child, NULL, 0);

  double* slowest = malloc(sizeof(double) * ops);
  for (int op = 0; op < ops; ++op) slowest[op] = op_us[op] > op_us[ops + op] ? op_us[op] : op_us[ops + op];
  const int pauses = ops / kPauseEvery - 1;  // each followed by kAfterPause ops
  printf("%s sum, %zu bytes: op (slowest rank) median %.2f us\n", argv[3], bytes,
         median(slowest + kPauseEvery, ops - kPauseEvery));
  printf("after a %d us pause, median of each block of %d ops:", pause_us, kBlock);
  double* per_pause = malloc(sizeof(double) * pauses);
  for (int block = 0; block < kAfterPause; block += kBlock) {
    for (int p = 0; p < pauses; ++p) per_pause[p] = median(slowest + (p + 1) * kPauseEvery + block, kBlock);
    printf(" %.1f", median(per_pause, pauses));
  }
  printf("\n");
  return 0;
}
