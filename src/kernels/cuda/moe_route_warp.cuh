/* moe_route_warp.cuh: gpt-oss's routing (top-k of the logits, softmax over those k) done
 * by the first warp of each block of the first expert kernel, so a decode or verify step
 * needs no routing launch of its own (spc_moe_route_ffn in cuda_ops.h). Internal to the
 * CUDA kernels.
 *
 * The result is k_moe_route's (cuda_moe.cu) bit for bit. Its top-k picks, k times, the
 * first untaken index whose value no later untaken value exceeds (`>`, so ties go to the
 * lower index and -0 ties +0). Without a NaN among the logits that is the order of the
 * keys (value descending, index ascending), so round j's pick is the warp's maximum of its
 * untaken keys in that order (rw_rounds: a butterfly of five shuffle steps a round; it
 * replaced ranking every index against all the others, whose E^2 / 32 comparisons a lane
 * made gpt-oss-120b's routing of 128 experts cost about 12 us in every block of the
 * gate_up launch). A NaN makes `>` no order at all (a NaN first untaken index wins its
 * round), so a token with one takes the sequential scan instead, in lane 0. The weights
 * are then rt_softmax's operations over the k chosen values, in slot order. */
#ifndef SP_KERNELS_CUDA_MOE_ROUTE_WARP_CUH
#define SP_KERNELS_CUDA_MOE_ROUTE_WARP_CUH

#include "kernels/cuda/decode.cuh"

/* Experts a warp routes: up to 4 logits a lane (gpt-oss-120b's 128; gpt-oss-20b's 32 take
 * one a lane: spc_route_per), the sizes test_cuda_moe_tc's routing test runs. */
#define SPC_RW_MAX_E 128
#define SPC_RW_MAX_K 8

/* Logits a lane for E experts: 1 up to 32, else 4 (the two instances the kernels have). */
static inline int spc_route_per(int E) { return E <= 32 ? 1 : 4; }

/* Routing folded into an expert kernel: logits NULL when the ids are given instead. */
struct spc_route_in {
    const float *logits; /* [n_tok, E] */
    int E, k;
    int32_t *ids;        /* [n_tok, k], written by the blocks with store set */
    float *w;            /* [n_tok, k] */
};

/* Whether the fold applies: gpt-oss's kind within the warp's limits. */
static inline bool spc_route_warp_ok(const sp_route_cfg *c)
{
    return c && c->kind == SP_MOE_TOPK_SOFTMAX && c->n_experts >= 1 && c->n_experts <= SPC_RW_MAX_E &&
           c->top_k >= 1 && c->top_k <= SPC_RW_MAX_K && c->top_k <= c->n_experts;
}

/* Lane 0's sequential top-k (rt_top_k's scan; taken as a bit set): slot `slot`'s id. */
static __device__ __noinline__ int32_t rw_scan(const float *l, int E, int slot)
{
    uint32_t taken[SPC_RW_MAX_E / 32] = {0};
    int b = -1;
    for (int j = 0; j <= slot; j++) {
        b = -1;
        for (int i = 0; i < E; i++)
            if (!((taken[i >> 5] >> (i & 31)) & 1u) && (b < 0 || l[i] > l[b]))
                b = i;
        taken[b >> 5] |= 1u << (b & 31);
    }
    return b;
}

/* The warp's best of every lane's candidate (bv, bi; bi < 0: none): the larger value, or of
 * equal values the lower index (a total order without NaN, so the xor butterfly leaves
 * every lane the same pair). */
static __device__ __forceinline__ void rw_best_of_warp(float &bv, int &bi)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(SPC_FULL_MASK, bv, off);
        const int oi = __shfl_xor_sync(SPC_FULL_MASK, bi, off);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi)))
            bv = ov, bi = oi;
    }
}

/* The warp's picks of rounds 0 .. rounds - 1 with no NaN among v (PER logits a lane, index
 * lane + 32 m): each round every lane takes the best of its own untaken indices, then the
 * xor butterfly keeps the better of two (larger, or equal and lower: a total order, so every
 * lane ends with the same winner). Lane j < rounds returns round j's id. */
template <int PER>
static __device__ __forceinline__ int32_t rw_rounds(const float v[PER], int E, int rounds)
{
    const int lane = threadIdx.x & 31;
    unsigned taken = 0; /* bit m: index lane + 32 m */
    int32_t mine = -1;
    for (int j = 0; j < rounds; j++) {
        float bv = 0.0f;
        int bi = -1;
#pragma unroll
        for (int m = 0; m < PER; m++) /* ascending indices: `>` keeps the lower of equals */
            if (lane + 32 * m < E && !((taken >> m) & 1u) && (bi < 0 || v[m] > bv))
                bv = v[m], bi = lane + 32 * m;
        rw_best_of_warp(bv, bi);
        if (lane == j)
            mine = bi;
        if ((bi & 31) == lane) /* bi >= 0: k <= E untaken indices remain */
            taken |= 1u << (bi >> 5);
    }
    return mine;
}

/* The warp's routing of token t: slot `slot`'s id; with want_w its weight in *w (every
 * lane the same). PER = ceil(E / 32) logits a lane. */
template <int PER>
static __device__ __forceinline__ int32_t rw_route(const spc_route_in &r, int64_t t, int slot, bool want_w,
                                                   float *w)
{
    const int lane = threadIdx.x & 31;
    const float *l = r.logits + t * (int64_t)r.E;
    float v[PER];
    bool nan = false;
#pragma unroll
    for (int m = 0; m < PER; m++) {
        v[m] = lane + 32 * m < r.E ? l[lane + 32 * m] : 0.0f;
        nan = nan || v[m] != v[m];
    }
    /* ids of slots 0..k-1 (the softmax needs them all; else up to the slot), lane j
     * holding slot j's */
    const int rounds = want_w ? r.k : slot + 1;
    int32_t mine = -1;
    if (__any_sync(SPC_FULL_MASK, nan)) { /* rare: the sequential scan decides */
        for (int j = 0; j < rounds; j++) {
            int32_t id = lane == 0 ? rw_scan(l, r.E, j) : 0;
            id = __shfl_sync(SPC_FULL_MASK, id, 0);
            if (lane == j)
                mine = id;
        }
    } else {
        mine = rw_rounds<PER>(v, r.E, rounds);
    }
    if (!want_w)
        return __shfl_sync(SPC_FULL_MASK, mine, slot);
    /* rt_softmax over the chosen values, in slot order (lane 0 computes, all get it) */
    float c = lane < r.k ? l[mine] : 0.0f, mx = __shfl_sync(SPC_FULL_MASK, c, 0), sum = 0.0f, ew = 0.0f;
    for (int j = 1; j < r.k; j++) {
        const float cj = __shfl_sync(SPC_FULL_MASK, c, j);
        mx = cj > mx ? cj : mx;
    }
    for (int j = 0; j < r.k; j++) {
        const float e = expf(__fsub_rn(__shfl_sync(SPC_FULL_MASK, c, j), mx));
        sum = __fadd_rn(sum, e);
        if (j == slot)
            ew = e;
    }
    *w = __fdiv_rn(ew, sum);
    return __shfl_sync(SPC_FULL_MASK, mine, slot);
}

/* Pair p's expert (token p / k, slot p % k), PER = spc_route_per(r.E) logits a lane: warp 0
 * routes, the block reads it from *sh.
 * Every thread of the block calls it (one barrier). With store, thread 0 writes ids[p]
 * and w[p] (one block of the launch does it for each pair). */
template <int PER>
static __device__ __forceinline__ int32_t spc_route_pair(const spc_route_in &r, int64_t p, bool store,
                                                         int32_t *sh)
{
    if (threadIdx.x < 32) {
        const int64_t t = p / r.k;
        const int slot = (int)(p % r.k);
        float w = 0.0f;
        const int32_t id = rw_route<PER>(r, t, slot, store, &w);
        if (threadIdx.x == 0) {
            *sh = id;
            if (store) {
                r.ids[p] = id;
                r.w[p] = w;
            }
        }
    }
    __syncthreads();
    return *sh;
}

#endif
