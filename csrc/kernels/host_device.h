// FASTCOMM_HOST_DEVICE: marks small inline helpers that CPU code and CUDA
// kernels share (kernels/syncbn_math.h, kernels/compress_format.h).
#pragma once

#if defined(__CUDACC__)
#define FASTCOMM_HOST_DEVICE __host__ __device__
#else
#define FASTCOMM_HOST_DEVICE
#endif
