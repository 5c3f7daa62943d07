/* tc_mma.cuh: the tensor-core primitives of the fast-precision kernels (cuda_tc.cu for
 * BF16 weights, cuda_moe_tc.cu for MXFP4 experts): one mma.sync m16n8k16 with BF16
 * operands and fp32 accumulation, and the fp32 -> BF16 rounding of x.
 *
 * Fragments of one m16n8k16 (thread g = lane / 4, q = lane % 4): a0 (rows g, k 2q, 2q+1),
 * a1 (row g + 8, the same k), a2 (row g, k 2q + 8, 2q + 9), a3 (row g + 8, those k); b0
 * (token g, k 2q, 2q + 1), b1 (token g, k 2q + 8, 2q + 9); c0 c1 (row g, tokens 2q, 2q + 1),
 * c2 c3 (row g + 8). Which matrix column a k slot holds is the caller's choice (each file
 * states its mapping): a dot product does not care, as long as a and b agree. */
#ifndef SP_KERNELS_CUDA_TC_MMA_CUH
#define SP_KERNELS_CUDA_TC_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

/* c += A B (fragments above) */
static __device__ __forceinline__ void tc_mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                              uint32_t a3, uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    (void)c, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
    __trap(); /* spc_tc_supported() refuses such devices */
#endif
}

/* fp32 -> bf16 pair, round to nearest even (low half = first element) */
static __device__ __forceinline__ uint32_t tc_pack(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

#endif
