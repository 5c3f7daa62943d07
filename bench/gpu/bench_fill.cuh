/* bench_fill.cuh: random BF16 weights for the standalone GPU harnesses (gemv_bench.cu,
 * rows_floor.cu): each element a hash of its index and a seed, any sign, exponent
 * 2^-8 .. 2^-1, 7 mantissa bits (finite, of a weight's size, never denormal). */
#ifndef SP_BENCH_GPU_BENCH_FILL_CUH
#define SP_BENCH_GPU_BENCH_FILL_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

__global__ void k_fill_bf16(unsigned short *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
        p[i] = (unsigned short)(((h & 1u) << 15) | ((119u + ((h >> 1) & 7u)) << 7) |
                                ((h >> 4) & 127u));
    }
}

#endif
