/* rmsnorm_row.cuh: one row's RMSNorm, optionally after a residual add, for one block of
 * RN_THREADS threads: the order every norm on the device uses (cuda_ops.h, spc_rmsnorm and
 * spc_add_rmsnorm), shared by the kernels that end in a norm (cuda_ops.cu's, and
 * cuda_moe.cu's expert sum + residual + norm). Internal to the CUDA kernels. */
#ifndef SP_KERNELS_CUDA_RMSNORM_ROW_CUH
#define SP_KERNELS_CUDA_RMSNORM_ROW_CUH

#include "kernels/cuda/decode.cuh"

#include <stdint.h>

#define RN_THREADS 256

#define RN_REG 16 /* elements per thread held in registers (dims up to 4096; more are re-read) */

/* The norm weights (or none: w NULL), as rn_row multiplies by them: brought into L2 by
 * load() before the kernel waits for the kernels before it (they do not depend on them),
 * then a thread's first NR read into registers by fetch() right after the row's own
 * loads are issued, so that they arrive during the sum of squares and the multiply waits
 * for no load; the rest of a longer row is read at the multiply. */
template <int NR = RN_REG> struct rn_w {
    const float *w;
    int64_t dim;
    float v[NR];
    __device__ __forceinline__ void load(const float *wp, int64_t n)
    {
        w = wp, dim = n;
        if (!wp)
            return;
        for (int64_t i = (int64_t)threadIdx.x * 32; i < n; i += (int64_t)RN_THREADS * 32)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(wp + i));
    }
    __device__ __forceinline__ void fetch()
    {
#pragma unroll
        for (int q = 0; q < NR; q++) {
            const int64_t i = threadIdx.x + (int64_t)q * RN_THREADS;
            v[q] = w && i < dim ? __ldg(w + i) : 0.0f;
        }
    }
};

/* The registers a thread needs for a row of dim elements (RN_REG: any dim, the rest
 * re-read): only the code's size changes, not the order. A norm runs as one block a token,
 * cold on its SM, where code it never executes still costs (the decode attention's note,
 * cuda_attention.cu): fitted, k_add_rmsnorm is 371 (dim <= 2048) or 554 PTX instructions
 * instead of 829, and H200 decode went llama-1b exact 1,197 -> 1,217 tok/s, fast 991 ->
 * 1,011, gpt-oss-20b shape fast 434 -> 440.5 (the expert sum + norm 2,108 -> 1,462). */
static inline int rn_fit(int64_t dim)
{
    return dim <= 8 * RN_THREADS ? 8 : dim <= 12 * RN_THREADS ? 12 : RN_REG;
}

/* A norm kernel's instance for rows of dim elements: its NR = 8, 12 or RN_REG instance
 * (k8, k12, kreg) by rn_fit, the one place the launches make that choice. */
template <typename K> static inline K rn_pick(int64_t dim, K k8, K k12, K kreg)
{
    const int nr = rn_fit(dim);
    return nr == 8 ? k8 : nr == 12 ? k12 : kreg;
}

/* The residual of rn_row read from memory: r[i]. */
struct rn_res_mem {
    const float *r;
    float got[RN_REG];
    __device__ __forceinline__ void fetch(int q, int64_t i) { got[q] = r[i]; }
    __device__ __forceinline__ float value(int q) const { return got[q]; }
    __device__ __forceinline__ float operator()(int64_t i) const { return r[i]; }
};

/* One row: v = x (+ r(i), stored back to x when ADD; r(i) also to rout[i] when rout is
 * given), out = rmsnorm(v) * w (w: rn_w, loaded). Thread t takes elements t, t + RN_THREADS, ... in
 * ascending order (its first NR residuals, then its first NR x values, loaded
 * together, so their loads are in flight at once; nothing is stored before they are all
 * issued) for the sum of squares (fmaf), then the warp butterflies and the eight warp sums
 * by a second butterfly. r gives the residual (rn_res_mem, or a value computed from other
 * rows, cuda_moe.cu's expert sum): r.fetch(q, i) issues the loads of element i into slot q
 * (< NR), r.value(q) is its residual after every fetch was issued, and r(i) that of an
 * element past the first RN_REG (loaded and used at once; only when NR is RN_REG: a
 * smaller NR is for rows of at most NR * RN_THREADS elements, rn_fit). */
template <bool ADD, int NR, typename R>
static __device__ __forceinline__ void rn_row(float *x, const float *xin, R r, rn_w<NR> &w,
                                              int64_t dim, float eps, float *o,
                                              float *rout = NULL)
{
    static_assert(NR >= 1 && NR <= RN_REG, "NR");
    __shared__ float part[RN_THREADS / 32];
    __shared__ float inv_s;
    const int64_t t0 = threadIdx.x;
    float v[NR], rv[NR] = {};
    if constexpr (ADD) {
#pragma unroll
        for (int q = 0; q < NR; q++) {
            const int64_t i = t0 + (int64_t)q * RN_THREADS;
            if (i < dim)
                r.fetch(q, i);
        }
    }
#pragma unroll
    for (int q = 0; q < NR; q++) {
        const int64_t i = t0 + (int64_t)q * RN_THREADS;
        v[q] = i < dim ? xin[i] : 0.0f;
    }
    w.fetch(); /* after the row's loads: they lead, the weights arrive during the sums */
    if constexpr (ADD) {
#pragma unroll
        for (int q = 0; q < NR; q++) {
            const int64_t i = t0 + (int64_t)q * RN_THREADS;
            rv[q] = i < dim ? r.value(q) : 0.0f;
            v[q] = i < dim ? __fadd_rn(v[q], rv[q]) : 0.0f;
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < NR; q++) {
        const int64_t i = t0 + (int64_t)q * RN_THREADS;
        if (i < dim) {
            if (ADD)
                x[i] = v[q];
            if (ADD && rout)
                rout[i] = rv[q];
            s = fmaf(v[q], v[q], s);
        }
    }
    for (int64_t i = t0 + (int64_t)RN_REG * RN_THREADS; NR == RN_REG && i < dim; i += RN_THREADS) {
        const float ri = ADD ? r(i) : 0.0f;
        float a = ADD ? __fadd_rn(xin[i], ri) : xin[i];
        if (ADD)
            x[i] = a;
        if (ADD && rout)
            rout[i] = ri;
        s = fmaf(a, a, s);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        s = __fadd_rn(s, __shfl_xor_sync(SPC_FULL_MASK, s, off));
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        float u = threadIdx.x < RN_THREADS / 32 ? part[threadIdx.x] : 0.0f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            u = __fadd_rn(u, __shfl_xor_sync(SPC_FULL_MASK, u, off));
        if (threadIdx.x == 0) {
            float ms = __fdiv_rn(u, (float)dim);
            inv_s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ms, eps)));
        }
    }
    __syncthreads();
    const float inv = inv_s;
#pragma unroll
    for (int q = 0; q < NR; q++) {
        const int64_t i = t0 + (int64_t)q * RN_THREADS;
        if (i < dim) {
            float a = __fmul_rn(v[q], inv);
            o[i] = w.w ? __fmul_rn(w.v[q], a) : a;
        }
    }
    for (int64_t i = t0 + (int64_t)RN_REG * RN_THREADS; NR == RN_REG && i < dim; i += RN_THREADS) {
        float a = __fmul_rn(ADD ? x[i] : xin[i], inv);
        o[i] = w.w ? __fmul_rn(w.w[i], a) : a;
    }
}

#endif
