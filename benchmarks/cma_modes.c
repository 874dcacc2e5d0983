// Why fastcomm's 64 KiB all_reduce rounds fall into two speeds: a reproducer
// without fastcomm (docs/algorithms.md "Binding ranks to CPUs", last paragraph).
//
// Two processes, pinned to CPUs 0 and 1, run the steps of fastcomm's 2-rank
// single-copy all_reduce (algorithms/shm_single_copy.cpp) in C: barrier; read
// the half this rank owns from the peer's tensor (process_vm_readv); add it to
// its own; write the sum back into the peer's tensor (process_vm_writev);
// barrier. Modes:
//   reread    the benchmarks' in-place loop: the next op reads back what this
//             rank's write left in the peer's tensor
//   fresh     every rank rewrites its tensor before each op (untimed), as a
//             training step produces new gradients
//   noreturn  no write back (the read's source is never written again)
// Prints, for rank 0, the median op and read times and the read's median in
// each block of 200 ops: steady blocks, or stretches of a second speed.
//
//   cc -O3 -march=native -o /tmp/cma_modes benchmarks/cma_modes.c
//   /tmp/cma_modes 65536 12000 reread     # bytes per tensor, ops, mode
//
// Needs 2 CPUs and ptrace access to a child (Yama ptrace_scope 0 or 1).
// Linux only; not built or run by CI.
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

enum { kBlock = 200, kWarmup = 500 };

typedef struct {
  _Atomic long posted;
  long pid;
  long tensor;
  char pad[104];  // one rank per 128 bytes: no false sharing between the two
} Control;

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
  if (argc != 4) {
    fprintf(stderr, "usage: %s BYTES OPS reread|fresh|noreturn\n", argv[0]);
    return 2;
  }
  const size_t bytes = strtoul(argv[1], NULL, 10) / 8 * 8, half = bytes / 2;
  const int ops = atoi(argv[2]);
  const int fresh = strcmp(argv[3], "fresh") == 0, write_back = strcmp(argv[3], "noreturn") != 0;
  if (bytes == 0 || ops <= kWarmup + kBlock) {
    fprintf(stderr, "need BYTES >= 8 and OPS > %d\n", kWarmup + kBlock);
    return 2;
  }
  Control* control = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  double* shared_op = mmap(NULL, sizeof(double) * ops * 2, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (control == MAP_FAILED || shared_op == MAP_FAILED) return 1;
  const pid_t child = fork();
  const int rank = child == 0 ? 1 : 0;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(rank, &cpus);
  sched_setaffinity(0, sizeof(cpus), &cpus);

  float* tensor = malloc(bytes);
  float* piece = malloc(half > (512 << 10) ? half : (1 << 20));  // as fastcomm: 1 MiB of pieces for 2 ranks (mmap-backed)
  const size_t count = bytes / sizeof(float);
  for (size_t i = 0; i < count; ++i) tensor[i] = 1.0f;
  control[rank].pid = getpid();
  control[rank].tensor = (long)tensor;
  long round = 0;
  barrier(control, rank, &round);
  const pid_t peer = (pid_t)control[1 - rank].pid;
  char* peer_half = (char*)control[1 - rank].tensor + rank * half;
  float* own_half = (float*)((char*)tensor + rank * half);
  double* read_us = malloc(sizeof(double) * ops);

  for (int op = 0; op < ops; ++op) {
    if (fresh) {
      for (size_t i = 0; i < count; ++i) tensor[i] = 1.0f;
    }
    barrier(control, rank, &round);
    const double start = now_us();
    struct iovec local = {piece, half}, remote = {peer_half, half};
    if (process_vm_readv(peer, &local, 1, &remote, 1, 0) != (ssize_t)half) {
      perror("process_vm_readv");
      return 1;
    }
    const double read_done = now_us();
    for (size_t i = 0; i < half / sizeof(float); ++i) own_half[i] += piece[i];
    if (own_half[0] > 1e30f) {  // keep the sums finite over many ops
      for (size_t i = 0; i < count; ++i) tensor[i] = 1.0f;
    }
    struct iovec result = {own_half, half};
    if (write_back && process_vm_writev(peer, &result, 1, &remote, 1, 0) != (ssize_t)half) {
      perror("process_vm_writev");
      return 1;
    }
    barrier(control, rank, &round);
    shared_op[rank * ops + op] = now_us() - start;
    read_us[op] = read_done - start;
  }
  if (rank == 1) return 0;
  waitpid(child, NULL, 0);

  const int timed = ops - kWarmup;
  double* slowest = malloc(sizeof(double) * timed);
  for (int op = 0; op < timed; ++op) {
    const double a = shared_op[kWarmup + op], b = shared_op[ops + kWarmup + op];
    slowest[op] = a > b ? a : b;
  }
  const double* reads = read_us + kWarmup;
  printf("%s, %zu bytes: op (slowest rank) median %.2f us, read (rank 0) median %.2f us\n", argv[3], bytes,
         median(slowest, timed), median(reads, timed));
  printf("read, median of each block of %d ops:", kBlock);
  for (int block = 0; block + kBlock <= timed; block += kBlock) printf(" %.1f", median(reads + block, kBlock));
  printf("\n");
  return 0;
}
