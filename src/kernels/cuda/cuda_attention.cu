/* cuda_attention.cu: causal attention over the KV cache (see cuda_ops.h, attention.h).
 *
 * The order of the arithmetic, the same in every kernel below (and so bit-identical
 * whether a position is computed alone, in a verify batch or in a prefill): the keys
 * lo..pos (lo the query's first visible position) are taken in chunks of AT_CHUNK = 128
 * starting at lo. Per chunk c: the scores (lanes stride over the head dim with fmaf, an
 * xor-butterfly), the chunk max m_c, p_j = exp(s_j - m_c), the chunk's sum of p ps_c by a
 * fixed tree (four 32-key butterflies added in order) and per output dim the fmaf chain
 * o_c = sum p_j v_j over the chunk's keys ascending, from 0. The chunks are then folded in
 * ascending order: m' = max(m, m_c), corr = exp(m - m') (0 for the first chunk),
 * cc = exp(m_c - m'), denom = denom corr + ps_c cc, acc = acc corr + o_c cc (each product
 * and sum rounded: no FMA). The sink joins the denominator at the end. Everything depends
 * only on (pos, window, dims). A context of one chunk gives the bits of the online softmax
 * this replaced (corr = 0, cc = 1).
 *
 * Because a chunk's partial (m_c, ps_c, o_c) no longer depends on the chunks before it, a
 * query's chunks can be computed by several blocks at once (the split, gridDim.z blocks
 * per (query, head)): each block computes a contiguous run of chunks and writes their
 * partials to device scratch, and the last block to finish (an atomic count per (query,
 * head), reset by that block) folds all the partials in ascending order. How many blocks
 * share a query is scheduling only; a block that owns every chunk folds them as it goes
 * and needs no scratch. H200, llama-1b decode (32 heads, 4 blocks a head): after a
 * 1024-token prompt 705-710 -> 870-874 tok/s (exact), after 512 tokens 693-697 -> 752-759
 * (fast); after 128 tokens (two chunks) unchanged within the noise, the kernel as long as
 * before (ncu 10.7 us: the half chunk saved is spent on the count and the fold).
 *
 * k_attention: one block of AT_THREADS per (query token, head, split): a warp scores
 * AT_KEYS of its keys at once and the value sum loads AT_VB rows ahead (the schedule of the
 * loads, not the arithmetic). Where the head dims allow (k_attention<true>), each chunk's
 * keys and values are first copied to shared memory by cp.async, the next chunk's while
 * this one is computed: again only the loads move (llama-1b decode, ctx ~190, H100: 24.9
 * -> 10.9 us a layer). k_attention_warp computes the same operations with one warp per
 * (query, head), for launches with many queries (below), and k_attention_rows with one
 * warp per four (or two) queries of a head (prefill without a window: each staged key and
 * value read once for all of them). */
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/decode.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

#define AT_THREADS 128
#define AT_WARPS (AT_THREADS / 32)
#define AT_CHUNK AT_THREADS
#define AT_CHUNK_LOG2 7 /* AT_CHUNK == 1 << AT_CHUNK_LOG2 */
#define AT_MAXD 576
#define AT_DPT ((AT_MAXD + AT_THREADS - 1) / AT_THREADS)
#define AT_KEYS 8 /* keys a warp scores at once (loads in flight) */
#define AT_VB 8   /* value rows loaded at once per output dim */
#define AT_MAX_SPLIT 8 /* blocks a (query, head) may be split over */
#define AT_SPLIT_ROWS 4096 /* (query, head) rows a split launch may have: its counts */

/* Device scratch of a split launch: cnt[AT_SPLIT_ROWS] arrival counts, row t * n_heads + h
 * (zero between launches: the last block resets its count; a fixed region, so that no
 * launch's partials overwrite the counts of another with more rows), then
 * part[(t * n_heads + h) * cmax + c] the partial of chunk c, v_dim + 2 floats (m_c, ps_c,
 * o_c[v_dim]). part == NULL: no split. */
struct at_split {
    float *part;
    unsigned *cnt;
    int cmax;
    int group; /* query heads per KV head */
    bool early; /* SPC_ATTN_PAST_READY: earlier passes' rows staged before the wait */
};

/* The fold of one chunk's partial (m_c, ps_c) into the running (m, denom): corr and cc
 * scale the running and the chunk's sums. The same expressions in every kernel. */
static __device__ __forceinline__ void at_fold_scales(float m, float m_c, float *mn, float *corr,
                                                      float *cc)
{
    *mn = fmaxf(m, m_c);
    *corr = m == -INFINITY ? 0.0f : expf(__fsub_rn(m, *mn));
    *cc = expf(__fsub_rn(m_c, *mn));
}

static __device__ __forceinline__ float at_fold(float run, float corr, float part, float cc)
{
    return __fadd_rn(__fmul_rn(run, corr), __fmul_rn(part, cc));
}

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

/* The staged block kernel keeps a chunk's keys and values in shared memory: a chunk of
 * AT_CHUNK rows of qk_dim + v_dim floats, for head dims up to AT_STAGE_DIMS together. */
#define AT_STAGE_DIMS 256
#define AT_STAGE_BYTES (AT_CHUNK * AT_STAGE_DIMS * 4)
static_assert(AT_STAGE_DIMS <= 2 * AT_THREADS, "a staged head's values: two dims a thread at most");
static_assert(AT_CHUNK == 1 << AT_CHUNK_LOG2, "AT_CHUNK_LOG2");

/* Copies n rows of one head (dim floats each, from src, `stride` floats apart, 16-byte
 * aligned) to dst [n][dim] by cp.async, the whole block (THREADS threads) issuing, and commits
 * them as one group (an empty group when n is 0). */
template <int THREADS = AT_THREADS>
static __device__ __forceinline__ void at_stage_rows(float *dst, const float *src, int64_t stride,
                                                     int n, int dim)
{
    const int per_row = dim / 4;
    if (THREADS % per_row == 0) { /* a thread keeps one 16-byte column: pointer steps only */
        const int step = THREADS / per_row, j0 = threadIdx.x / per_row;
        const int c = (threadIdx.x - j0 * per_row) * 4;
        const float *sp = src + (int64_t)j0 * stride + c;
        float *dp = dst + j0 * dim + c;
        const int64_t sstep = (int64_t)step * stride;
        const int dstep = step * dim;
        for (int j = j0; j < n; j += step, sp += sstep, dp += dstep)
            spc_cp16(dp, sp);
    } else {
        const int total = n * per_row;
        for (int i = threadIdx.x; i < total; i += THREADS) {
            const int j = i / per_row, c = (i - j * per_row) * 4;
            spc_cp16(dst + j * dim + c, src + (int64_t)j * stride + c);
        }
    }
    spc_cp_commit();
}

/* A load of a key or value element: from shared memory when staged, else through the
 * read-only cache. */
template <bool STAGE> static __device__ __forceinline__ float at_ld(const float *p)
{
    if constexpr (STAGE)
        return *p;
    else
        return __ldg(p);
}

/* STAGE: the chunk's keys and values come through shared memory (dynamic, AT_CHUNK x
 * (qk_dim + v_dim) floats), copied by cp.async: a chunk's keys while the previous chunk's
 * values are summed, its values while its keys are scored. The arithmetic is the same
 * either way (the same loads' values, the same operations): the staging moves only the
 * loads, so that a chunk costs about one memory round trip instead of one per AT_KEYS
 * keys and per AT_VB value rows. sp: the split's scratch (gridDim.z blocks per (query,
 * head); part NULL when gridDim.z is 1).
 * DPT: the output dims a thread holds (ceil(v_dim / AT_THREADS), AT_DPT at most); HD > 0:
 * qk_dim == v_dim == HD, known to the compiler. Both only size the code: a decode step runs
 * this kernel once on each of its SMs, cold, so its warps wait for instructions to arrive
 * (ncu, llama-1b decode at ctx ~190: 31% of the stall samples "no instruction", 7,272 SASS
 * instructions for AT_DPT dims of any size, 64-bit divisions for the split and the KV
 * head). With HD 64, DPT 1 and 32-bit index math the launch took 10.5 -> 7.3 us (ncu, H200)
 * and llama-1b exact decode 1,096 -> 1,157-1,164 tok/s. */
template <bool STAGE, int DPT, int HD>
__global__ void __launch_bounds__(AT_THREADS) k_attention(const sp_attn_args a, const at_split sp)
{
    spc_pdl_trigger();
    /* the head's sink (a weight: read before the wait, used at the end) */
    const float sink = a.sinks ? __ldg(a.sinks + blockIdx.x) : 0.0f;
    const bool early = STAGE && sp.early;
    if (!early)
        spc_pdl_wait(); /* launched as a programmatic dependent */
    __shared__ float qs[AT_MAXD];
    __shared__ float sc[AT_CHUNK];
    __shared__ float red[AT_WARPS];
    __shared__ int last;
    extern __shared__ float4 at_stage[];
    const int64_t qk_dim = HD ? HD : a.qk_dim, v_dim = HD ? HD : a.v_dim; /* HD: both known */
    const int64_t h = blockIdx.x, t = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t pos = a.q_pos ? (int64_t)a.q_pos[t] : a.pos0 + t; /* q_pos: replayable */
    int64_t lo = 0;
    if (a.window > 0 && pos - a.window + 1 > 0)
        lo = pos - a.window + 1;
    /* this block's chunks c0..c1-1 of the query's C, and how many blocks hold some (32-bit
     * arithmetic: the host keeps C * S within it) */
    const int C = (int)((pos - lo) >> AT_CHUNK_LOG2) + 1, S = (int)gridDim.z, z = (int)blockIdx.z;
    int c0 = 0, c1 = C, holders = 1;
    if (S > 1 && sp.part && C > 1 && C <= sp.cmax) {
        if (C <= S) { /* a chunk a block; blocks C.. have none */
            c0 = z < C ? z : C, c1 = z < C ? z + 1 : C, holders = C;
        } else {
            c0 = (int)((unsigned)(z * C) / (unsigned)S);
            c1 = (int)((unsigned)((z + 1) * C) / (unsigned)S), holders = S;
        }
    }
    if (c0 >= c1 || (holders == 1 && z != 0))
        return; /* the whole block: no barrier below */
    const bool alone = holders == 1;
    const int64_t kbeg = lo + (int64_t)c0 * AT_CHUNK;
    const int64_t kend = lo + (int64_t)c1 * AT_CHUNK - 1 < pos ? lo + (int64_t)c1 * AT_CHUNK - 1 : pos;
    const int64_t kvh = (int64_t)((unsigned)h / (unsigned)sp.group);
    const int64_t ks = a.k_stride ? a.k_stride : a.n_kv_heads * qk_dim;
    const int64_t vs = a.v_stride ? a.v_stride : a.n_kv_heads * v_dim;
    const float *q = a.q + t * a.q_stride + h * qk_dim;
    const float *kbase = a.k_cache + kvh * qk_dim;
    const float *vbase = a.v_cache + kvh * v_dim;
    float *kst = (float *)at_stage, *vst = kst + AT_CHUNK * qk_dim;
    if constexpr (STAGE) {
        const int n0 = (int)(kend - kbeg + 1 < AT_CHUNK ? kend - kbeg + 1 : AT_CHUNK);
        /* early: the first chunk's rows before the segment's first position (earlier
         * passes' rows: complete when this pass began) are copied before the wait, the
         * rest after it (four groups instead of two: the waits below still find the keys,
         * then the values, complete) */
        int np = 0;
        if (early) {
            const int64_t first = a.q_pos ? (int64_t)a.q_pos[0] : a.pos0;
            np = first <= kbeg ? 0 : first - kbeg < n0 ? (int)(first - kbeg) : n0;
            at_stage_rows(kst, kbase + kbeg * ks, ks, np, (int)qk_dim);
            at_stage_rows(vst, vbase + kbeg * vs, vs, np, (int)v_dim);
            spc_pdl_wait();
        }
        at_stage_rows(kst + np * qk_dim, kbase + (kbeg + np) * ks, ks, n0 - np, (int)qk_dim);
        at_stage_rows(vst + np * v_dim, vbase + (kbeg + np) * vs, vs, n0 - np, (int)v_dim);
    }
    for (int64_t d = threadIdx.x; d < qk_dim; d += AT_THREADS)
        qs[d] = q[d];
    __syncthreads();

    float m = -INFINITY, denom = 0.0f, acc[DPT];
#pragma unroll
    for (int i = 0; i < DPT; i++)
        acc[i] = 0.0f;
    float *slot = sp.part ? sp.part + ((t * a.n_heads + h) * sp.cmax + c0) * (v_dim + 2) : NULL;

    for (int64_t cb = kbeg; cb <= kend; cb += AT_CHUNK) {
        int n = (int)(kend - cb + 1 < AT_CHUNK ? kend - cb + 1 : AT_CHUNK);
        /* the chunk's rows: staged (row j at j * dim) or in the cache (at (cb + j) * stride) */
        const float *kc = STAGE ? kst : kbase + cb * ks;
        const float *vc = STAGE ? vst : vbase + cb * vs;
        /* row strides: 32-bit in shared memory (fewer address instructions) */
        using idx = typename std::conditional<STAGE, int, int64_t>::type;
        const idx kcs = STAGE ? (idx)qk_dim : (idx)ks, vcs = STAGE ? (idx)v_dim : (idx)vs;
        if constexpr (STAGE) {
            spc_cp_wait<1>(); /* this chunk's keys (its values may still be in flight) */
            __syncthreads();
        }
        /* warp w scores keys w, w + AT_WARPS, ... as before, AT_KEYS of them at a time so
         * their loads are in flight together; each key's sum is unchanged */
        for (int jb = warp; jb < n; jb += AT_WARPS * AT_KEYS) {
            float s[AT_KEYS];
            const float *kp[AT_KEYS];
#pragma unroll
            for (int q = 0; q < AT_KEYS; q++) {
                s[q] = 0.0f;
                int jj = jb + q * AT_WARPS;
                kp[q] = kc + (idx)(jj < n ? jj : jb) * kcs;
            }
            for (int64_t d = lane; d < qk_dim; d += 32) {
                const float qd = qs[d];
                float kv[AT_KEYS];
#pragma unroll
                for (int q = 0; q < AT_KEYS; q++)
                    kv[q] = at_ld<STAGE>(kp[q] + d);
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
        if constexpr (STAGE) { /* the keys are scored: the next chunk's may come in */
            const int64_t nb = cb + AT_CHUNK;
            const int nn = (int)(nb > kend ? 0 : kend - nb + 1 < AT_CHUNK ? kend - nb + 1 : AT_CHUNK);
            at_stage_rows(kst, kbase + (nb > kend ? kbeg : nb) * ks, ks, nn, (int)qk_dim);
            spc_cp_wait<1>(); /* this chunk's values; block_max's barrier publishes them */
        }
        float mine = threadIdx.x < n ? sc[threadIdx.x] : -INFINITY;
        float cm = block_max(mine, red);
        float p = threadIdx.x < n ? expf(__fsub_rn(mine, cm)) : 0.0f;
        sc[threadIdx.x] = p; /* each thread rewrites its own slot; block_max synced reads */
        float ps = block_sum(p, red); /* its barriers also publish sc */
        float mn, corr, cc;
        at_fold_scales(m, cm, &mn, &corr, &cc);
        if (alone)
            denom = at_fold(denom, corr, ps, cc);
        else if (threadIdx.x == 0)
            slot[0] = cm, slot[1] = ps;
#pragma unroll
        for (int i = 0; i < DPT; i++) {
            int64_t d = threadIdx.x + (int64_t)i * AT_THREADS;
            if (d < v_dim) {
                float o = 0.0f;
                const float *v = vc + d;
                int jj = 0;
                for (; jj + AT_VB <= n; jj += AT_VB) { /* AT_VB loads in flight, same order */
                    float vv[AT_VB];
#pragma unroll
                    for (int q = 0; q < AT_VB; q++)
                        vv[q] = at_ld<STAGE>(v + (idx)(jj + q) * vcs);
#pragma unroll
                    for (int q = 0; q < AT_VB; q++)
                        o = fmaf(sc[jj + q], vv[q], o);
                }
                for (; jj < n; jj++)
                    o = fmaf(sc[jj], v[jj * vcs], o);
                if (alone)
                    acc[i] = at_fold(acc[i], corr, o, cc);
                else
                    slot[2 + d] = o;
            }
        }
        m = mn;
        slot = slot ? slot + v_dim + 2 : NULL;
        __syncthreads(); /* sc (and the staged values) are rewritten by the next chunk */
        if constexpr (STAGE) {
            const int64_t nb = cb + AT_CHUNK;
            const int nn = (int)(nb > kend ? 0 : kend - nb + 1 < AT_CHUNK ? kend - nb + 1 : AT_CHUNK);
            at_stage_rows(vst, vbase + (nb > kend ? kbeg : nb) * vs, vs, nn, (int)v_dim);
        }
    }
    if constexpr (STAGE)
        spc_cp_wait<0>(); /* the empty tail groups */
    if (!alone) { /* the last of the holders folds every chunk's partial, ascending */
        unsigned *cnt = sp.cnt + t * a.n_heads + h;
        __syncthreads(); /* the block's partials are written ... */
        if (threadIdx.x == 0) { /* ... and released with its arrival; the last acquires all */
            unsigned old;
            asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;"
                         : "=r"(old)
                         : "l"(cnt)
                         : "memory");
            last = old == (unsigned)(holders - 1);
        }
        __syncthreads();
        if (!last)
            return;
        const float *ps_ = sp.part + (t * a.n_heads + h) * sp.cmax * (v_dim + 2);
        m = -INFINITY;
        for (int c = 0; c < C; c++, ps_ += v_dim + 2) {
            float mn, corr, cc;
            at_fold_scales(m, __ldcg(ps_), &mn, &corr, &cc);
            denom = at_fold(denom, corr, __ldcg(ps_ + 1), cc);
#pragma unroll
            for (int i = 0; i < DPT; i++) {
                int64_t d = threadIdx.x + (int64_t)i * AT_THREADS;
                if (d < v_dim)
                    acc[i] = at_fold(acc[i], corr, __ldcg(ps_ + 2 + d), cc);
            }
            m = mn;
        }
        if (threadIdx.x == 0)
            *cnt = 0; /* for the next launch */
    }
    if (a.sinks) {
        float mn = fmaxf(m, sink);
        float corr = m == -INFINITY ? 0.0f : expf(__fsub_rn(m, mn));
        denom = __fadd_rn(__fmul_rn(denom, corr), expf(__fsub_rn(sink, mn)));
#pragma unroll
        for (int i = 0; i < DPT; i++)
            acc[i] = __fmul_rn(acc[i], corr);
    }
    float inv = __fdiv_rn(1.0f, denom);
    float *o = a.out + (t * a.n_heads + h) * v_dim;
#pragma unroll
    for (int i = 0; i < DPT; i++) {
        int64_t d = threadIdx.x + (int64_t)i * AT_THREADS;
        if (d < v_dim)
            o[d] = __fmul_rn(acc[i], inv);
    }
}

/* ---- one warp per (query, head) ------------------------------------------------------
 * k_attention's arithmetic, operation for operation, computed by one warp instead of a
 * block: each key's score is the same lane-strided fmaf sum and xor-butterfly (the
 * butterflies of AW_KEYS keys exchanged together, transposed: aw_level); the chunk
 * max is a max (exact in any order); the chunk's sum of p is the same four 32-key
 * butterflies added in the same order (k_attention's warps w = keys 32w..32w+31, their sums
 * (((s0 + s1) + s2) + s3)); every output dim the same fmaf chain over the chunk's keys
 * ascending from 0, and the chunks folded in ascending order as k_attention folds them
 * (at_fold_scales, at_fold), whether that kernel split the query's chunks or not.
 * So both kernels give the same bits, and spc_attention may pick either by the launch's
 * size (test_cuda_attention runs every attention case through both and compares bits). The
 * score batch, value sum and sink epilogue are written out twice on purpose: shared
 * __device__ helpers gave the same bits but changed k_attention's code generation (96 -> 72
 * registers) and cost llama-1b decode 9% on an H100 (456-458 -> 417-418 tok/s). A block
 * holds AW_WARPS consecutive heads of one query (a GQA group shares its keys through L1):
 * many queries (prefill) keep every SM busy without k_attention's barriers. Its own batch
 * sizes (AW_KEYS, AW_VB) are the schedule only, as AT_KEYS / AT_VB are the block
 * kernel's, and so is DPL, the output dims a lane holds registers for (2, 4 or AW_DPL, by
 * the launch's v_dim). H200, llama-1b prefill of 512 tokens (fast): 43.3-43.8k -> 47.7k
 * tok/s with the transposed butterflies, DPL and 16-byte loads of p (one launch 306 ->
 * 285 us, 227M -> 184M instructions), 48.8k -> 53.1k with a chunk's rows staged once for
 * the block's heads (STAGE: 286 -> 233 us, 146M instructions; gpt-oss-20b shape 13.8k ->
 * 14.3k; docs/BENCHMARKS_GPU.md). */
#define AW_WARPS 4
#define AW_DPL ((AT_MAXD + 31) / 32) /* output dims a lane owns */
#define AW_KEYS 16 /* keys a warp scores at once (the transposed levels assume 16) */
#define AW_VB 16   /* value rows loaded at once per output dim */
#define AW_STAGE_BYTES (64 * 1024) /* a staged chunk's keys and values, at most */

/* One level of AW_KEYS keys' xor-butterflies done at once, transposed: a lane holds 2H
 * partial sums, keeps the half its bit P picks and sends the other half to lane ^ P, so
 * each exchange adds the very pair of partial sums the per-key butterfly adds at level P
 * (a + b == b + a bit for bit), for H keys a lane instead of 2H. */
template <int P, int H> static __device__ __forceinline__ void aw_level(float *s, int lane)
{
    const bool up = (lane & P) != 0;
#pragma unroll
    for (int i = 0; i < H; i++) {
        const float keep = up ? s[i + H] : s[i], send = up ? s[i] : s[i + H];
        s[i] = __fadd_rn(keep, __shfl_xor_sync(SPC_FULL_MASK, send, P));
    }
}

/* STAGE: the block's AW_WARPS heads share one KV head (a GQA group of a multiple of
 * AW_WARPS heads): each chunk's keys and values are copied once into shared memory
 * (dynamic, AT_CHUNK x (qk_dim + v_dim) floats) by the whole block, and the warps read
 * them there, with 32-bit addresses, instead of each from the cache. Only the loads move. */
template <int DPL, bool STAGE>
__global__ void __launch_bounds__(AW_WARPS * 32) k_attention_warp(const sp_attn_args a)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    __shared__ float qs_all[AW_WARPS][AT_MAXD];
    __shared__ __align__(16) float sc_all[AW_WARPS][AT_CHUNK];
    extern __shared__ float4 aw_stage[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t h = (int64_t)blockIdx.x * AW_WARPS + warp, t = blockIdx.y;
    if (!STAGE && h >= a.n_heads)
        return; /* no block-wide barrier below (STAGE: every head exists) */
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

    float m = -INFINITY, denom = 0.0f, acc[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++)
        acc[i] = 0.0f;
    const float *kbase = a.k_cache + kvh * a.qk_dim;
    const float *vbase = a.v_cache + kvh * a.v_dim;

    float *kst = (float *)aw_stage, *vst = kst + AT_CHUNK * a.qk_dim;
    for (int64_t cb = lo; cb <= pos; cb += AT_CHUNK) {
        const int n = (int)(pos - cb + 1 < AT_CHUNK ? pos - cb + 1 : AT_CHUNK);
        if constexpr (STAGE) { /* the chunk's rows, once for the block's heads */
            __syncthreads(); /* every warp is done with the previous chunk */
            at_stage_rows(kst, kbase + cb * ks, ks, n, (int)a.qk_dim);
            at_stage_rows(vst, vbase + cb * vs, vs, n, (int)a.v_dim);
            spc_cp_wait<0>();
            __syncthreads();
        }
        /* the chunk's rows: staged (row j at j * dim) or in the cache (at (cb + j) * stride) */
        using idx = typename std::conditional<STAGE, int, int64_t>::type;
        const float *kc = STAGE ? kst : kbase + cb * ks;
        const idx kcs = STAGE ? (idx)a.qk_dim : (idx)ks;
        for (int jb = 0; jb < n; jb += AW_KEYS) { /* AW_KEYS keys' loads in flight */
            float s[AW_KEYS];
            const float *kp[AW_KEYS];
#pragma unroll
            for (int k = 0; k < AW_KEYS; k++) {
                s[k] = 0.0f;
                kp[k] = kc + (idx)(jb + k < n ? jb + k : jb) * kcs;
            }
            for (int64_t d = lane; d < a.qk_dim; d += 32) {
                const float qd = qs[d];
                float kv[AW_KEYS];
#pragma unroll
                for (int k = 0; k < AW_KEYS; k++)
                    kv[k] = at_ld<STAGE>(kp[k] + d);
#pragma unroll
                for (int k = 0; k < AW_KEYS; k++)
                    s[k] = fmaf(qd, kv[k], s[k]);
            }
            /* the 16 keys' butterflies at once (aw_level): lane l ends with key l / 2's
             * sum, as lane l ^ 1 does */
            aw_level<16, 8>(s, lane);
            aw_level<8, 4>(s, lane);
            aw_level<4, 2>(s, lane);
            aw_level<2, 1>(s, lane);
            const float v = __fadd_rn(s[0], __shfl_xor_sync(SPC_FULL_MASK, s[0], 1));
            if (!(lane & 1) && jb + (lane >> 1) < n)
                sc[jb + (lane >> 1)] = __fmul_rn(v, a.scale);
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
        float ps = 0.0f;
#pragma unroll
        for (int w = 0; w < AT_WARPS; w++) {
            const float p = 32 * w + lane < n ? expf(__fsub_rn(mine[w], cm)) : 0.0f;
            sc[32 * w + lane] = p;
            float v = p;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                v = __fadd_rn(v, __shfl_xor_sync(SPC_FULL_MASK, v, off));
            ps = w == 0 ? v : __fadd_rn(ps, v);
        }
        __syncwarp();
        float mn, corr, cc;
        at_fold_scales(m, cm, &mn, &corr, &cc);
        denom = at_fold(denom, corr, ps, cc);
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int64_t d = lane + (int64_t)i * 32;
            if (d < a.v_dim) {
                float o = 0.0f;
                const float *v = (STAGE ? vst : vbase + cb * vs) + d;
                const idx vcs = STAGE ? (idx)a.v_dim : (idx)vs;
                int jj = 0;
                for (; jj + AW_VB <= n; jj += AW_VB) {
                    float vv[AW_VB];
#pragma unroll
                    for (int k = 0; k < AW_VB; k++)
                        vv[k] = at_ld<STAGE>(v + (idx)(jj + k) * vcs);
#pragma unroll
                    for (int k = 0; k < AW_VB; k += 4) { /* jj % 4 == 0: 16-byte loads of p */
                        const float4 p = *reinterpret_cast<const float4 *>(sc + jj + k);
                        o = fmaf(p.x, vv[k], o);
                        o = fmaf(p.y, vv[k + 1], o);
                        o = fmaf(p.z, vv[k + 2], o);
                        o = fmaf(p.w, vv[k + 3], o);
                    }
                }
                for (; jj < n; jj++)
                    o = fmaf(sc[jj], v[(idx)jj * vcs], o);
                acc[i] = at_fold(acc[i], corr, o, cc);
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
        for (int i = 0; i < DPL; i++)
            acc[i] = __fmul_rn(acc[i], corr);
    }
    const float inv = __fdiv_rn(1.0f, denom);
    float *o = a.out + (t * a.n_heads + h) * a.v_dim;
#pragma unroll
    for (int i = 0; i < DPL; i++) {
        const int64_t d = lane + (int64_t)i * 32;
        if (d < a.v_dim)
            o[d] = __fmul_rn(acc[i], inv);
    }
}

/* ---- Q queries a warp, G query groups a block -----------------------------------------
 * k_attention_warp<DPL, true>'s operations for Q consecutive queries t0 .. t0 + Q - 1 of one
 * head at once (launches without a window, so every query's chunks start at key 0 and
 * coincide): each staged key and value element is read once from shared memory into a
 * register and used in all Q queries' fmaf chains. A block holds AW_WARPS heads of one GQA
 * group times G query groups, all of them sharing each staged chunk (the rows up to the
 * block's last position). Per query every score, max, sum, chain and fold is the
 * single-query kernel's, in its order: the query's qk_dim values live in registers (D a
 * lane, D * 32 >= qk_dim, v_dim), its dot products run over d = lane, lane + 32, ...
 * ascending as there, its value chain stops at its own last key while the others go on,
 * and a query with no key in a chunk skips it as the single-query kernel's loop would end
 * before it. So the bits are the same; only the shared-memory and L2 reads drop
 * (test_cuda_attention compares every case's bits with the block kernel's). */
template <int D, int Q, int G>
__global__ void __launch_bounds__(AW_WARPS * G * 32, 3)
    k_attention_rows(const sp_attn_args a)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    constexpr int WARPS = AW_WARPS * G;
    __shared__ __align__(16) float sc_all[WARPS][Q][AT_CHUNK];
    extern __shared__ float4 aw_stage[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t h = (int64_t)blockIdx.x * AW_WARPS + warp % AW_WARPS;
    const int64_t tb = (int64_t)Q * G * blockIdx.y, t0 = tb + Q * (warp / AW_WARPS);
    int64_t blast = -1; /* the block's last position: the rows it stages */
    for (int64_t t = tb; t < tb + Q * G && t < a.n_tok; t++) {
        const int64_t p = a.q_pos ? (int64_t)a.q_pos[t] : a.pos0 + t;
        blast = p > blast ? p : blast;
    }
    int64_t pos[Q];
    float q[Q][D];
#pragma unroll
    for (int i = 0; i < Q; i++) {
        const int64_t t = t0 + i;
        pos[i] = t >= a.n_tok ? -1 : a.q_pos ? (int64_t)a.q_pos[t] : a.pos0 + t;
        const float *qp = a.q + (t < a.n_tok ? t : 0) * a.q_stride + h * a.qk_dim;
#pragma unroll
        for (int k = 0; k < D; k++)
            q[i][k] = pos[i] >= 0 && lane + 32 * k < a.qk_dim ? qp[lane + 32 * k] : 0.0f;
    }
    const int64_t kvh = h / (a.n_heads / a.n_kv_heads);
    const int64_t ks = a.k_stride ? a.k_stride : a.n_kv_heads * a.qk_dim;
    const int64_t vs = a.v_stride ? a.v_stride : a.n_kv_heads * a.v_dim;
    float m[Q], denom[Q], acc[Q][D];
#pragma unroll
    for (int i = 0; i < Q; i++) {
        m[i] = -INFINITY, denom[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < D; k++)
            acc[i][k] = 0.0f;
    }
    const float *kbase = a.k_cache + kvh * a.qk_dim;
    const float *vbase = a.v_cache + kvh * a.v_dim;
    float *kst = (float *)aw_stage, *vst = kst + AT_CHUNK * a.qk_dim;
    for (int64_t cb = 0; cb <= blast; cb += AT_CHUNK) {
        int n[Q], nmax = 0, nmin = AT_CHUNK;
#pragma unroll
        for (int i = 0; i < Q; i++) {
            n[i] = (int)(pos[i] - cb + 1 < AT_CHUNK ? (pos[i] - cb + 1 > 0 ? pos[i] - cb + 1 : 0)
                                                    : AT_CHUNK);
            nmax = n[i] > nmax ? n[i] : nmax;
            nmin = n[i] < nmin ? n[i] : nmin;
        }
        const int nb = (int)(blast - cb + 1 < AT_CHUNK ? blast - cb + 1 : AT_CHUNK);
        __syncthreads(); /* every warp is done with the previous chunk */
        at_stage_rows<WARPS * 32>(kst, kbase + cb * ks, ks, nb, (int)a.qk_dim);
        at_stage_rows<WARPS * 32>(vst, vbase + cb * vs, vs, nb, (int)a.v_dim);
        spc_cp_wait<0>();
        __syncthreads();
        for (int jb = 0; jb < nmax; jb += AW_KEYS) { /* every query's scores of 16 keys */
            float s[Q][AW_KEYS];
            const float *kp[AW_KEYS];
#pragma unroll
            for (int k = 0; k < AW_KEYS; k++) {
#pragma unroll
                for (int i = 0; i < Q; i++)
                    s[i][k] = 0.0f;
                kp[k] = kst + (jb + k < nmax ? jb + k : jb) * (int)a.qk_dim + lane;
            }
#pragma unroll
            for (int c = 0; c < D; c++) { /* d = lane + 32 c ascending, as the d loop there */
                if (lane + 32 * c < a.qk_dim) {
#pragma unroll
                    for (int k = 0; k < AW_KEYS; k++) {
                        const float kv = kp[k][32 * c];
#pragma unroll
                        for (int i = 0; i < Q; i++)
                            s[i][k] = fmaf(q[i][c], kv, s[i][k]);
                    }
                }
            }
            const int j = jb + (lane >> 1);
#pragma unroll
            for (int i = 0; i < Q; i++) {
                aw_level<16, 8>(s[i], lane);
                aw_level<8, 4>(s[i], lane);
                aw_level<4, 2>(s[i], lane);
                aw_level<2, 1>(s[i], lane);
                const float v = __fadd_rn(s[i][0], __shfl_xor_sync(SPC_FULL_MASK, s[i][0], 1));
                if (!(lane & 1) && j < n[i])
                    sc_all[warp][i][j] = __fmul_rn(v, a.scale);
            }
        }
        __syncwarp();
        float corr[Q], cc[Q];
#pragma unroll
        for (int i = 0; i < Q; i++) {
            corr[i] = cc[i] = 0.0f;
            if (n[i] == 0)
                continue;
            float *sc = sc_all[warp][i];
            float mine[AT_WARPS], cm = -INFINITY;
#pragma unroll
            for (int w = 0; w < AT_WARPS; w++) {
                mine[w] = 32 * w + lane < n[i] ? sc[32 * w + lane] : -INFINITY;
                cm = fmaxf(cm, mine[w]);
            }
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                cm = fmaxf(cm, __shfl_xor_sync(SPC_FULL_MASK, cm, off));
            float ps = 0.0f;
#pragma unroll
            for (int w = 0; w < AT_WARPS; w++) {
                const float p = 32 * w + lane < n[i] ? expf(__fsub_rn(mine[w], cm)) : 0.0f;
                sc[32 * w + lane] = p;
                float v = p;
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
                    v = __fadd_rn(v, __shfl_xor_sync(SPC_FULL_MASK, v, off));
                ps = w == 0 ? v : __fadd_rn(ps, v);
            }
            float mn;
            at_fold_scales(m[i], cm, &mn, &corr[i], &cc[i]);
            denom[i] = at_fold(denom[i], corr[i], ps, cc[i]);
            m[i] = mn;
        }
        __syncwarp();
#pragma unroll
        for (int k = 0; k < D; k++) {
            const int d = lane + k * 32;
            if (d < a.v_dim) {
                float o[Q];
#pragma unroll
                for (int i = 0; i < Q; i++)
                    o[i] = 0.0f;
                const float *v = vst + d;
                const int vcs = (int)a.v_dim;
                int jj = 0;
                for (; jj + AW_VB <= nmin; jj += AW_VB) { /* every chain */
                    float vv[AW_VB];
#pragma unroll
                    for (int e = 0; e < AW_VB; e++)
                        vv[e] = v[(jj + e) * vcs];
#pragma unroll
                    for (int e = 0; e < AW_VB; e += 4) {
#pragma unroll
                        for (int i = 0; i < Q; i++) {
                            const float4 p = *reinterpret_cast<const float4 *>(sc_all[warp][i] + jj + e);
                            o[i] = fmaf(p.x, vv[e], o[i]);
                            o[i] = fmaf(p.y, vv[e + 1], o[i]);
                            o[i] = fmaf(p.z, vv[e + 2], o[i]);
                            o[i] = fmaf(p.w, vv[e + 3], o[i]);
                        }
                    }
                }
#pragma unroll
                for (int i = 0; i < Q; i++) { /* each chain's own last keys */
                    const float *p = sc_all[warp][i];
                    for (int j = jj; j < n[i]; j++)
                        o[i] = fmaf(p[j], v[j * vcs], o[i]);
                    if (n[i])
                        acc[i][k] = at_fold(acc[i][k], corr[i], o[i], cc[i]);
                }
            }
        }
        __syncwarp(); /* sc is rewritten by the next chunk */
    }
#pragma unroll
    for (int i = 0; i < Q; i++) {
        if (pos[i] < 0)
            break;
        float mq = m[i], dq = denom[i];
        if (a.sinks) {
            const float sink = a.sinks[h];
            const float mn = fmaxf(mq, sink);
            const float corr = mq == -INFINITY ? 0.0f : expf(__fsub_rn(mq, mn));
            dq = __fadd_rn(__fmul_rn(dq, corr), expf(__fsub_rn(sink, mn)));
#pragma unroll
            for (int k = 0; k < D; k++)
                acc[i][k] = __fmul_rn(acc[i][k], corr);
        }
        const float inv = __fdiv_rn(1.0f, dq);
        float *o = a.out + ((t0 + i) * a.n_heads + h) * a.v_dim;
#pragma unroll
        for (int k = 0; k < D; k++) {
            const int64_t d = lane + (int64_t)k * 32;
            if (d < a.v_dim)
                o[d] = __fmul_rn(acc[i][k], inv);
        }
    }
}

/* Queries from which a launch takes the warp kernel (the same bits; this is speed). */
#define AT_WARP_MIN_TOK 16

/* Per device: 1 when k_attention<true> may use AT_STAGE_BYTES of shared memory, -1 when
 * not, 0 not asked yet (spc_attention_setup, outside any graph capture). */
#define AT_MAX_DEVICES 64
static int g_at_stage[AT_MAX_DEVICES];
static int g_aw_stage[AT_MAX_DEVICES]; /* the same for k_attention_warp's staged instances */
/* k_attention_rows' queries a warp x 10 + query groups a block (4 heads of a GQA group a
 * group). H200, llama-1b prefill (fast), pp512 / pp2048 tok/s and the attention's ncu time
 * at 512 tokens (16 launches): one query a warp 53.5k / 26.9k, 3.71 ms; 2 x 2 (the wgmma
 * GEMM in both) 71.4k / 41.4k, 2.18 ms; 4 x 1 73.6k / 43.8k, 1.97 ms; 4 x 2 73.4k, 2.00 ms
 * (128 registers with spills: two blocks an SM). */
static int g_aw_rows = 41;

extern "C" void spc_attention_setup(void)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= AT_MAX_DEVICES)
        return;
    if (g_at_stage[dev])
        return;
    cudaError_t e = cudaFuncSetAttribute(k_attention<true, 1, 0>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, AT_STAGE_BYTES);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_attention<true, 2, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 AT_STAGE_BYTES);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_attention<true, 1, 64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 AT_STAGE_BYTES);
    g_at_stage[dev] = e == cudaSuccess ? 1 : -1;
    if (e != cudaSuccess)
        (void)cudaGetLastError(); /* not sticky: the unstaged kernel serves */
    e = cudaFuncSetAttribute(k_attention_warp<2, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             AW_STAGE_BYTES);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_attention_warp<4, true>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, AW_STAGE_BYTES);
#define AP_ATTR(D, Q, G)                                                                  \
    if (e == cudaSuccess)                                                                    \
        e = cudaFuncSetAttribute(k_attention_rows<D, Q, G>,                                  \
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, AW_STAGE_BYTES);
    AP_ATTR(2, 2, 2) AP_ATTR(4, 2, 2) AP_ATTR(2, 4, 1) AP_ATTR(4, 4, 1)
#undef AP_ATTR
    g_aw_stage[dev] = e == cudaSuccess ? 1 : -1;
    if (e != cudaSuccess)
        (void)cudaGetLastError();
    /* queries a warp x 10 + groups a block: 41, 22, or 0: one query a warp (to compare) */
    const char *pe = getenv("SPECULA_CUDA_ATTN_ROWS");
    if (pe && (!strcmp(pe, "0") || !strcmp(pe, "22") || !strcmp(pe, "41")))
        g_aw_rows = atoi(pe);
}

/* The launch may stage its chunks: the device was set up for it, both head dims and row
 * strides are whole 16-byte units and the caches 16-byte aligned, and a chunk fits. */
static bool at_can_stage(const sp_attn_args *a)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= AT_MAX_DEVICES || g_at_stage[dev] != 1)
        return false;
    const int64_t ks = a->k_stride ? a->k_stride : a->n_kv_heads * a->qk_dim;
    const int64_t vs = a->v_stride ? a->v_stride : a->n_kv_heads * a->v_dim;
    return a->qk_dim % 4 == 0 && a->v_dim % 4 == 0 && ks % 4 == 0 && vs % 4 == 0 &&
           a->qk_dim + a->v_dim <= AT_STAGE_DIMS && ((uintptr_t)a->k_cache & 15) == 0 &&
           ((uintptr_t)a->v_cache & 15) == 0;
}

/* The warp kernel may stage a chunk's rows for its block: the block's AW_WARPS heads share
 * a KV head (the group a multiple of AW_WARPS), the rows qualify as for k_attention<true>,
 * the chunk fits AW_STAGE_BYTES and the device was set up for it. */
static size_t aw_stage_bytes(const sp_attn_args *a)
{
    return (size_t)AT_CHUNK * (size_t)(a->qk_dim + a->v_dim) * sizeof(float);
}

static bool aw_can_stage(const sp_attn_args *a)
{
    int dev = 0;
    return a->n_heads % a->n_kv_heads == 0 && (a->n_heads / a->n_kv_heads) % AW_WARPS == 0 &&
           a->v_dim <= 128 && aw_stage_bytes(a) <= AW_STAGE_BYTES && at_can_stage(a) &&
           cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < AT_MAX_DEVICES &&
           g_aw_stage[dev] == 1;
}

/* Chunks a query of this launch may have (its keys: at most the cache's n_ctx positions,
 * or the window): the split's scratch has room for that many partials per (query, head).
 * A replayed launch whose query has more (a caller that left n_ctx unset) is computed by
 * one block per (query, head): the same bits. */
static int64_t at_cmax(const sp_attn_args *a)
{
    int64_t keys = a->n_ctx > a->pos0 + a->n_tok ? a->n_ctx : a->pos0 + a->n_tok;
    if (a->window > 0 && a->window < keys)
        keys = a->window;
    return (keys + AT_CHUNK - 1) / AT_CHUNK;
}

#define AT_CNT_BYTES ((size_t)AT_SPLIT_ROWS * sizeof(unsigned))

extern "C" size_t spc_attention_split_bytes(const sp_attn_args *a)
{
    return AT_CNT_BYTES + (size_t)(a->n_tok * a->n_heads) * (size_t)at_cmax(a) *
                              (size_t)(a->v_dim + 2) * sizeof(float);
}

extern "C" int spc_attention_split(void *stream, const sp_attn_args *a, int which, int splits,
                                   void *scratch, size_t scratch_bytes)
{
    if (!a || a->n_tok < 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 ||
        a->n_heads % a->n_kv_heads || a->qk_dim <= 0 || a->qk_dim > AT_MAXD || a->v_dim <= 0 ||
        a->v_dim > AT_MAXD || a->n_tok > 65535 || a->pos0 < 0 || splits < 0)
        return a && a->n_tok == 0 ? 0 : (int)cudaErrorInvalidValue;
    const bool past_ready = which & SPC_ATTN_PAST_READY;
    which &= ~SPC_ATTN_PAST_READY;
    if (which < 0 || which > 3)
        return (int)cudaErrorInvalidValue;
    if (a->n_tok == 0)
        return 0;
    const bool warp_kernel = which == 2 || (which == 0 && a->n_tok >= AT_WARP_MIN_TOK);
    if (warp_kernel) {
        dim3 grid((unsigned)((a->n_heads + AW_WARPS - 1) / AW_WARPS), (unsigned)a->n_tok);
#define AW_LAUNCH(DPL, STAGE)                                                                \
    spc_launch_smem(k_attention_warp<DPL, STAGE>, grid, dim3(AW_WARPS * 32),                   \
                    STAGE ? aw_stage_bytes(a) : 0, (cudaStream_t)stream, true, *a)
        const bool stage = aw_can_stage(a);
        if (stage && a->window <= 0 && a->n_tok >= 2 && g_aw_rows) { /* queries share keys */
            const int Q = g_aw_rows / 10, G = g_aw_rows % 10;
            const bool d2 = a->qk_dim <= 64 && a->v_dim <= 64;
            const dim3 g2(grid.x, (unsigned)((a->n_tok + Q * G - 1) / (Q * G)));
            const dim3 blk(AW_WARPS * 32 * G);
            const size_t sm = aw_stage_bytes(a);
            cudaStream_t st = (cudaStream_t)stream;
#define AR_LAUNCH(DD, QQ, GG)                                                                \
    if (d2 == (DD == 2) && Q == QQ && G == GG)                                               \
        spc_launch_smem(k_attention_rows<DD, QQ, GG>, g2, blk, sm, st, true, *a);
            AR_LAUNCH(2, 2, 2) AR_LAUNCH(4, 2, 2) AR_LAUNCH(2, 4, 1) AR_LAUNCH(4, 4, 1)
#undef AR_LAUNCH
            return spc_launch_status();
        }
        if (a->v_dim <= 64)
            stage ? AW_LAUNCH(2, true) : AW_LAUNCH(2, false);
        else if (a->v_dim <= 128)
            stage ? AW_LAUNCH(4, true) : AW_LAUNCH(4, false);
        else
            AW_LAUNCH(AW_DPL, false);
#undef AW_LAUNCH
        return spc_launch_status();
    }
    /* the split: by default as many blocks per (query, head) as keep the grid within one
     * block per SM (the launch after it stays a programmatic dependent), at most the
     * chunks a query may have; scheduling only, never the bits */
    const int64_t cmax = at_cmax(a), rows = a->n_tok * a->n_heads;
    int64_t S = splits ? splits : spc_sm_count > 0 ? spc_sm_count / rows : 1;
    S = S > AT_MAX_SPLIT ? AT_MAX_SPLIT : S > cmax ? cmax : S < 1 ? 1 : S;
    at_split sp = {NULL, NULL, (int)(cmax < INT32_MAX ? cmax : INT32_MAX),
                   (int)(a->n_heads / a->n_kv_heads), false};
    if (S > 1 && scratch && rows <= AT_SPLIT_ROWS && spc_attention_split_bytes(a) <= scratch_bytes &&
        cmax <= INT32_MAX / AT_MAX_SPLIT) { /* the kernel's 32-bit chunk arithmetic */
        sp.cnt = (unsigned *)scratch;
        sp.part = (float *)((char *)scratch + AT_CNT_BYTES);
    } else {
        S = 1;
    }
    dim3 grid((unsigned)a->n_heads, (unsigned)a->n_tok, (unsigned)S);
    /* DPT: the output dims a thread holds (the code for no more than the head needs) */
    cudaStream_t st = (cudaStream_t)stream;
    if (which != 3 && at_can_stage(a)) { /* then v_dim < AT_STAGE_DIMS: at most two */
        const size_t smem = (size_t)AT_CHUNK * (size_t)(a->qk_dim + a->v_dim) * sizeof(float);
        sp.early = past_ready;
        if (a->qk_dim == 64 && a->v_dim == 64) /* llama's and gpt-oss's heads: dims folded */
            spc_launch_smem(k_attention<true, 1, 64>, grid, dim3(AT_THREADS), smem, st, true, *a, sp);
        else if (a->v_dim <= AT_THREADS)
            spc_launch_smem(k_attention<true, 1, 0>, grid, dim3(AT_THREADS), smem, st, true, *a, sp);
        else
            spc_launch_smem(k_attention<true, 2, 0>, grid, dim3(AT_THREADS), smem, st, true, *a, sp);
    } else if (a->v_dim <= AT_THREADS) {
        spc_launch(k_attention<false, 1, 0>, grid, dim3(AT_THREADS), st, true, *a, sp);
    } else {
        spc_launch(k_attention<false, AT_DPT, 0>, grid, dim3(AT_THREADS), st, true, *a, sp);
    }
    return spc_launch_status();
}

extern "C" int spc_attention_kernel(void *stream, const sp_attn_args *a, int which)
{
    return spc_attention_split(stream, a, which, 1, NULL, 0);
}

extern "C" int spc_attention(void *stream, const sp_attn_args *a)
{
    return spc_attention_kernel(stream, a, 0);
}
