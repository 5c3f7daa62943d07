/* cuda_attention.cu: causal attention over the KV cache (see cuda_ops.h, attention.h).
 *
 * One block of AT_THREADS per (query token, head). Keys lo..pos are taken in chunks of
 * AT_CHUNK (= AT_THREADS) starting at lo, the query's first visible position. Per chunk:
 * scores (one warp per key: lanes stride over the head dim with fmaf, xor-butterfly),
 * the chunk max, p_j = exp(s_j - m) with m the running max, the chunk's sum of p by a
 * fixed tree, the output accumulators (thread d owns output dims d, d + AT_THREADS, ...)
 * rescaled then p_j v_j added for j ascending. The sink joins the denominator at the
 * end. Everything depends only on (pos, window, dims): batch-invariant. A warp scores
 * AT_KEYS of its keys at once and the value sum loads AT_VB rows ahead: the schedule of
 * the loads, not the arithmetic (bits unchanged from the one-key-at-a-time version).
 * k_attention_warp computes the same operations with one warp per (query, head), for
 * launches with many queries (below). */
#include "kernels/cuda/decode.cuh"

#include <math.h>

#define AT_THREADS 128
#define AT_WARPS (AT_THREADS / 32)
#define AT_CHUNK AT_THREADS
#define AT_MAXD 576
#define AT_DPT ((AT_MAXD + AT_THREADS - 1) / AT_THREADS)
#define AT_KEYS 8 /* keys a warp scores at once (loads in flight) */
#define AT_VB 8   /* value rows loaded at once per output dim */

static __device__ __forceinline__ float block_sum(float v, float *red)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(SPC_FULL_MASK, v, off));
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = red[0];
#pragma unroll
    for (int k = 1; k < AT_WARPS; k++)
        s = __fadd_rn(s, red[k]);
    __syncthreads();
    return s;
}

static __device__ __forceinline__ float block_max(float v, float *red)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(SPC_FULL_MASK, v, off));
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = red[0];
#pragma unroll
    for (int k = 1; k < AT_WARPS; k++)
        s = fmaxf(s, red[k]);
    __syncthreads();
    return s;
}

__global__ void __launch_bounds__(AT_THREADS) k_attention(const sp_attn_args a)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    __shared__ float qs[AT_MAXD];
    __shared__ float sc[AT_CHUNK];
    __shared__ float red[AT_WARPS];
    const int64_t h = blockIdx.x, t = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t pos = a.q_pos ? (int64_t)a.q_pos[t] : a.pos0 + t; /* q_pos: replayable */
    int64_t lo = 0;
    if (a.window > 0 && pos - a.window + 1 > 0)
        lo = pos - a.window + 1;
    const int64_t kvh = h / (a.n_heads / a.n_kv_heads);
    const int64_t ks = a.k_stride ? a.k_stride : a.n_kv_heads * a.qk_dim;
    const int64_t vs = a.v_stride ? a.v_stride : a.n_kv_heads * a.v_dim;
    const float *q = a.q + t * a.q_stride + h * a.qk_dim;
    for (int64_t d = threadIdx.x; d < a.qk_dim; d += AT_THREADS)
        qs[d] = q[d];
    __syncthreads();

    float m = -INFINITY, denom = 0.0f, acc[AT_DPT];
#pragma unroll
    for (int i = 0; i < AT_DPT; i++)
        acc[i] = 0.0f;
    const float *kbase = a.k_cache + kvh * a.qk_dim;
    const float *vbase = a.v_cache + kvh * a.v_dim;

    for (int64_t cb = lo; cb <= pos; cb += AT_CHUNK) {
        int n = (int)(pos - cb + 1 < AT_CHUNK ? pos - cb + 1 : AT_CHUNK);
        /* warp w scores keys w, w + AT_WARPS, ... as before, AT_KEYS of them at a time so
         * their loads are in flight together; each key's sum is unchanged */
        for (int jb = warp; jb < n; jb += AT_WARPS * AT_KEYS) {
            float s[AT_KEYS];
            const float *kp[AT_KEYS];
#pragma unroll
            for (int q = 0; q < AT_KEYS; q++) {
                s[q] = 0.0f;
                int jj = jb + q * AT_WARPS;
                kp[q] = kbase + (cb + (jj < n ? jj : jb)) * ks;
            }
            for (int64_t d = lane; d < a.qk_dim; d += 32) {
                const float qd = qs[d];
                float kv[AT_KEYS];
#pragma unroll
                for (int q = 0; q < AT_KEYS; q++)
                    kv[q] = __ldg(kp[q] + d);
#pragma unroll
                for (int q = 0; q < AT_KEYS; q++)
                    s[q] = fmaf(qd, kv[q], s[q]);
            }
#pragma unroll
            for (int q = 0; q < AT_KEYS; q++) {
                float v = s[q];
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
                    v = __fadd_rn(v, __shfl_xor_sync(SPC_FULL_MASK, v, off));
                int jj = jb + q * AT_WARPS;
                if (lane == 0 && jj < n)
                    sc[jj] = __fmul_rn(v, a.scale);
            }
        }
        __syncthreads();
        float mine = threadIdx.x < n ? sc[threadIdx.x] : -INFINITY;
        float cm = block_max(mine, red);
        float mn = fmaxf(m, cm);
        float corr = m == -INFINITY ? 0.0f : expf(__fsub_rn(m, mn));
        float p = threadIdx.x < n ? expf(__fsub_rn(mine, mn)) : 0.0f;
        sc[threadIdx.x] = p; /* each thread rewrites its own slot; block_max synced reads */
        float ps = block_sum(p, red); /* its barriers also publish sc */
        denom = __fadd_rn(__fmul_rn(denom, corr), ps);
#pragma unroll
        for (int i = 0; i < AT_DPT; i++) {
            int64_t d = threadIdx.x + (int64_t)i * AT_THREADS;
            if (d < a.v_dim) {
                float o = __fmul_rn(acc[i], corr);
                const float *v = vbase + cb * vs + d;
                int jj = 0;
                for (; jj + AT_VB <= n; jj += AT_VB) { /* AT_VB loads in flight, same order */
                    float vv[AT_VB];
#pragma unroll
                    for (int q = 0; q < AT_VB; q++)
                        vv[q] = __ldg(v + (int64_t)(jj + q) * vs);
#pragma unroll
                    for (int q = 0; q < AT_VB; q++)
                        o = fmaf(sc[jj + q], vv[q], o);
                }
                for (; jj < n; jj++)
                    o = fmaf(sc[jj], v[jj * vs], o);
                acc[i] = o;
            }
        }
        m = mn;
        __syncthreads(); /* sc is rewritten by the next chunk */
    }
    if (a.sinks) {
        float sink = a.sinks[h];
        float mn = fmaxf(m, sink);
        float corr = m == -INFINITY ? 0.0f : expf(__fsub_rn(m, mn));
        denom = __fadd_rn(__fmul_rn(denom, corr), expf(__fsub_rn(sink, mn)));
#pragma unroll
        for (int i = 0; i < AT_DPT; i++)
            acc[i] = __fmul_rn(acc[i], corr);
    }
    float inv = __fdiv_rn(1.0f, denom);
    float *o = a.out + (t * a.n_heads + h) * a.v_dim;
#pragma unroll
    for (int i = 0; i < AT_DPT; i++) {
        int64_t d = threadIdx.x + (int64_t)i * AT_THREADS;
        if (d < a.v_dim)
            o[d] = __fmul_rn(acc[i], inv);
    }
}

/* ---- one warp per (query, head) ------------------------------------------------------
 * k_attention's arithmetic, operation for operation, computed by one warp instead of a
 * block: each key's score is the same lane-strided fmaf sum and xor-butterfly; the chunk
 * max is a max (exact in any order); the chunk's sum of p is the same four 32-key
 * butterflies added in the same order (k_attention's warps w = keys 32w..32w+31, their sums
 * (((s0 + s1) + s2) + s3)); every output dim the same fmaf chain over the keys ascending.
 * So both kernels give the same bits, and spc_attention may pick either by the launch's
 * size (test_cuda_kernels runs every attention case through both and compares bits). The
 * score batch, value sum and sink epilogue are written out twice on purpose: shared
 * __device__ helpers gave the same bits but changed k_attention's code generation (96 -> 72
 * registers) and cost llama-1b decode 9% on an H100 (456-458 -> 417-418 tok/s). A block holds AW_WARPS consecutive heads of one query (a GQA group shares its keys
 * through L1): many queries (prefill) keep every SM busy without k_attention's barriers. */
#define AW_WARPS 4
#define AW_DPL ((AT_MAXD + 31) / 32) /* output dims a lane owns */

__global__ void __launch_bounds__(AW_WARPS * 32) k_attention_warp(const sp_attn_args a)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    __shared__ float qs_all[AW_WARPS][AT_MAXD];
    __shared__ float sc_all[AW_WARPS][AT_CHUNK];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t h = (int64_t)blockIdx.x * AW_WARPS + warp, t = blockIdx.y;
    if (h >= a.n_heads)
        return; /* no block-wide barrier below */
    float *qs = qs_all[warp], *sc = sc_all[warp];
    const int64_t pos = a.q_pos ? (int64_t)a.q_pos[t] : a.pos0 + t;
    int64_t lo = 0;
    if (a.window > 0 && pos - a.window + 1 > 0)
        lo = pos - a.window + 1;
    const int64_t kvh = h / (a.n_heads / a.n_kv_heads);
    const int64_t ks = a.k_stride ? a.k_stride : a.n_kv_heads * a.qk_dim;
    const int64_t vs = a.v_stride ? a.v_stride : a.n_kv_heads * a.v_dim;
    const float *q = a.q + t * a.q_stride + h * a.qk_dim;
    for (int64_t d = lane; d < a.qk_dim; d += 32)
        qs[d] = q[d];
    __syncwarp();

    float m = -INFINITY, denom = 0.0f, acc[AW_DPL];
#pragma unroll
    for (int i = 0; i < AW_DPL; i++)
        acc[i] = 0.0f;
    const float *kbase = a.k_cache + kvh * a.qk_dim;
    const float *vbase = a.v_cache + kvh * a.v_dim;

    for (int64_t cb = lo; cb <= pos; cb += AT_CHUNK) {
        const int n = (int)(pos - cb + 1 < AT_CHUNK ? pos - cb + 1 : AT_CHUNK);
        for (int jb = 0; jb < n; jb += AT_KEYS) { /* AT_KEYS keys' loads in flight */
            float s[AT_KEYS];
            const float *kp[AT_KEYS];
#pragma unroll
            for (int k = 0; k < AT_KEYS; k++) {
                s[k] = 0.0f;
                kp[k] = kbase + (cb + (jb + k < n ? jb + k : jb)) * ks;
            }
            for (int64_t d = lane; d < a.qk_dim; d += 32) {
                const float qd = qs[d];
                float kv[AT_KEYS];
#pragma unroll
                for (int k = 0; k < AT_KEYS; k++)
                    kv[k] = __ldg(kp[k] + d);
#pragma unroll
                for (int k = 0; k < AT_KEYS; k++)
                    s[k] = fmaf(qd, kv[k], s[k]);
            }
#pragma unroll
            for (int k = 0; k < AT_KEYS; k++) {
                float v = s[k];
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
                    v = __fadd_rn(v, __shfl_xor_sync(SPC_FULL_MASK, v, off));
                if (lane == 0 && jb + k < n)
                    sc[jb + k] = __fmul_rn(v, a.scale);
            }
        }
        __syncwarp();
        float mine[AT_WARPS], cm = -INFINITY;
#pragma unroll
        for (int w = 0; w < AT_WARPS; w++) {
            mine[w] = 32 * w + lane < n ? sc[32 * w + lane] : -INFINITY;
            cm = fmaxf(cm, mine[w]);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            cm = fmaxf(cm, __shfl_xor_sync(SPC_FULL_MASK, cm, off));
        const float mn = fmaxf(m, cm);
        const float corr = m == -INFINITY ? 0.0f : expf(__fsub_rn(m, mn));
        float ps = 0.0f;
#pragma unroll
        for (int w = 0; w < AT_WARPS; w++) {
            const float p = 32 * w + lane < n ? expf(__fsub_rn(mine[w], mn)) : 0.0f;
            sc[32 * w + lane] = p;
            float v = p;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                v = __fadd_rn(v, __shfl_xor_sync(SPC_FULL_MASK, v, off));
            ps = w == 0 ? v : __fadd_rn(ps, v);
        }
        __syncwarp();
        denom = __fadd_rn(__fmul_rn(denom, corr), ps);
#pragma unroll
        for (int i = 0; i < AW_DPL; i++) {
            const int64_t d = lane + (int64_t)i * 32;
            if (d < a.v_dim) {
                float o = __fmul_rn(acc[i], corr);
                const float *v = vbase + cb * vs + d;
                int jj = 0;
                for (; jj + AT_VB <= n; jj += AT_VB) {
                    float vv[AT_VB];
#pragma unroll
                    for (int k = 0; k < AT_VB; k++)
                        vv[k] = __ldg(v + (int64_t)(jj + k) * vs);
#pragma unroll
                    for (int k = 0; k < AT_VB; k++)
                        o = fmaf(sc[jj + k], vv[k], o);
                }
                for (; jj < n; jj++)
                    o = fmaf(sc[jj], v[jj * vs], o);
                acc[i] = o;
            }
        }
        m = mn;
        __syncwarp(); /* sc is rewritten by the next chunk */
    }
    if (a.sinks) {
        const float sink = a.sinks[h];
        const float mn = fmaxf(m, sink);
        const float corr = m == -INFINITY ? 0.0f : expf(__fsub_rn(m, mn));
        denom = __fadd_rn(__fmul_rn(denom, corr), expf(__fsub_rn(sink, mn)));
#pragma unroll
        for (int i = 0; i < AW_DPL; i++)
            acc[i] = __fmul_rn(acc[i], corr);
    }
    const float inv = __fdiv_rn(1.0f, denom);
    float *o = a.out + (t * a.n_heads + h) * a.v_dim;
#pragma unroll
    for (int i = 0; i < AW_DPL; i++) {
        const int64_t d = lane + (int64_t)i * 32;
        if (d < a.v_dim)
            o[d] = __fmul_rn(acc[i], inv);
    }
}

/* Queries from which a launch takes the warp kernel (the same bits; this is speed). */
#define AT_WARP_MIN_TOK 16

extern "C" int spc_attention_kernel(void *stream, const sp_attn_args *a, int which)
{
    if (!a || a->n_tok < 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 ||
        a->n_heads % a->n_kv_heads || a->qk_dim <= 0 || a->qk_dim > AT_MAXD || a->v_dim <= 0 ||
        a->v_dim > AT_MAXD || a->n_tok > 65535 || a->pos0 < 0 || which < 0 || which > 2)
        return a && a->n_tok == 0 ? 0 : (int)cudaErrorInvalidValue;
    if (a->n_tok == 0)
        return 0;
    const bool warp_kernel = which == 2 || (which == 0 && a->n_tok >= AT_WARP_MIN_TOK);
    if (warp_kernel) {
        dim3 grid((unsigned)((a->n_heads + AW_WARPS - 1) / AW_WARPS), (unsigned)a->n_tok);
        spc_launch(k_attention_warp, grid, dim3(AW_WARPS * 32), (cudaStream_t)stream, true, *a);
    } else {
        dim3 grid((unsigned)a->n_heads, (unsigned)a->n_tok);
        spc_launch(k_attention, grid, dim3(AT_THREADS), (cudaStream_t)stream, true, *a);
    }
    return spc_launch_status();
}

extern "C" int spc_attention(void *stream, const sp_attn_args *a)
{
    return spc_attention_kernel(stream, a, 0);
}
