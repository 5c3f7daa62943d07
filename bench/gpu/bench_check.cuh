/* bench_check.cuh: the standalone GPU harnesses' (gemv_bench.cu, l2_prefetch_bench.cu,
 * rows_floor.cu) check of a CUDA call or of a CUDA library call's status (cuda_ops.h's
 * functions return cudaError_t values as int): on an error, the file, line and CUDA's
 * message, then exit (a harness, not library code: src/ returns statuses instead). */
#ifndef SP_BENCH_GPU_BENCH_CHECK_CUH
#define SP_BENCH_GPU_BENCH_CHECK_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(e)                                                                                  \
    do {                                                                                       \
        const cudaError_t r_ = (cudaError_t)(e);                                               \
        if (r_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(r_));         \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#endif
