/* cuda_tc.cuh: what the two schedules of the fast-precision BF16 products share (the
 * few-token rows kernel in cuda_tc.cu, the many-token GEMM in cuda_tc_gemm.cu): the step
 * and slice sizes of the order in cuda_ops.h, the step's two mma in the fragment mapping
 * below, and the matrices of one launch. Internal to the CUDA kernels.
 *
 * Operand fragments: a thread (g = lane / 4, q = lane % 4) of a 16 x 8 tile reads, for a
 * 32-column step at k0, the 8 consecutive elements k0 + 8q .. k0 + 8q + 7 of W rows g and
 * g + 8 and of token g's x (one 16-byte load each, no ldmatrix: ldmatrix would hand a
 * 16-byte row to four threads, a different k-slot assignment); elements 0-3 feed the
 * step's first mma, 4-7 its second, in the register order of tc_mma2. Both schedules use
 * this mapping, so the tensor core sees the same operands in the same places. */
#ifndef SP_KERNELS_CUDA_TC_CUH
#define SP_KERNELS_CUDA_TC_CUH

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/tc_mma.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

#define TC_BK 32                 /* columns a step: two k16 mma */
#define TC_KS 128                /* columns a slice: one mma chain */
#define TC_SLICE (TC_KS / TC_BK) /* steps a slice */
#define TC_ROWS_MAX_TOK 16       /* tokens up to which the rows kernel runs (speed only) */

/* c += one step: lo / hi are rows g and g + 8 (8 bf16 each), b token g's 8 bf16 as
 * pairs. mma 1 takes pairs 0 (k 2q) and 1 (k 2q + 8), mma 2 pairs 2 and 3. */
static __device__ __forceinline__ void tc_mma2(float c[4], const uint4 &lo, const uint4 &hi,
                                               const uint32_t b[4])
{
    tc_mma(c, lo.x, hi.x, lo.y, hi.y, b[0], b[1]);
    tc_mma(c, lo.z, hi.z, lo.w, hi.w, b[2], b[3]);
}

/* 8 elements of x at p, two float4 (16-byte aligned when xvec; else element loads) */
static __device__ __forceinline__ void tc_x8(const float *p, bool xvec, float4 &u, float4 &v)
{
    if (xvec) {
        u = __ldg(reinterpret_cast<const float4 *>(p));
        v = __ldg(reinterpret_cast<const float4 *>(p) + 1);
    } else {
        u = make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
        v = make_float4(__ldg(p + 4), __ldg(p + 5), __ldg(p + 6), __ldg(p + 7));
    }
}

/* 8 fp32 -> 4 bf16 pairs (round to nearest even), in element order */
static __device__ __forceinline__ void tc_pack8(const float4 &u, const float4 &v, uint32_t b[4])
{
    b[0] = tc_pack(u.x, u.y);
    b[1] = tc_pack(u.z, u.w);
    b[2] = tc_pack(v.x, v.y);
    b[3] = tc_pack(v.z, v.w);
}

/* The matrices of one launch (all with `cols` columns). */
struct tc_set {
    const unsigned char *w[SPC_MULTI_MAX];
    size_t ld[SPC_MULTI_MAX]; /* bytes between rows */
    int64_t rows[SPC_MULTI_MAX];
    float *y[SPC_MULTI_MAX];
    const float *b[SPC_MULTI_MAX];
    unsigned grp0[SPC_MULTI_MAX + 1]; /* first row block of each matrix (set by the launch) */
    int n;
    int64_t cols;
    bool swiglu; /* w[0] gate, w[1] up: y[0] = silu(gate) * up */
};

/* ---- the GEMM (cuda_tc_gemm.cu) ----------------------------------------------------- */

/* Tokens of `cols` columns whose BF16 copy (rows padded to whole 32-column steps) fits
 * `bytes` of scratch at s (0: none fit or s is not 16-byte aligned). */
int64_t tc_gemm_tokens(int64_t cols, const void *s, size_t bytes);

/* The product of n_tok (> TC_ROWS_MAX_TOK, <= tc_gemm_tokens) tokens: x rounded to BF16
 * into the scratch, then the GEMM with the tile chosen for the device (or forced). */
int tc_gemm_run(cudaStream_t s, tc_set &set, const float *x, int64_t n_tok, void *scratch);

/* Once per device, outside any graph capture: the shared-memory limits and the SM count
 * (and tc_wgmma_setup). */
bool tc_gemm_setup(int dev, int sms);

/* ---- the GEMM on wgmma (cuda_tc_wgmma.cu; Hopper, code built for sm_90a) --------------
 * The same products and bits; x goes to the scratch in slot order (rows padded to whole
 * 32-column steps: tc_gemm_tokens counts them so). */
bool tc_wgmma_setup(int dev); /* false only for a bad device index; else readies if it can */
bool tc_wgmma_ready(void);    /* the current device runs it (SPECULA_CUDA_WGMMA=0: never) */
int tc_wgmma_run(cudaStream_t s, tc_set &set, const float *x, int64_t n_tok, void *scratch,
                 int sms);

#endif
