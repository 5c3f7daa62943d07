/* moe_route_warp.cuh: gpt-oss's routing (top-k of the logits, softmax over those k) done
 * by a warp inside the first expert kernel, so a decode or verify step needs no routing
 * launch of its own (spc_moe_route_ffn in cuda_ops.h). Internal to the CUDA kernels.
 *
 * The result is k_moe_route's (cuda_moe.cu) bit for bit. Its top-k picks, k times, the
 * first untaken index whose value no later untaken value exceeds (`>`, so ties go to the
 * lower index and -0 ties +0). Without a NaN among the logits that is the order of the
 * keys (value descending, index ascending): slot j is the index whose rank is j, where an
 * index's rank counts the indices that beat it. A NaN makes `>` no order at all (a NaN
 * first untaken index wins its round), so a token with one takes the sequential scan
 * instead, in lane 0. The weights are then rt_softmax's operations over the k chosen
 * values, in slot order. */
#ifndef SP_KERNELS_CUDA_MOE_ROUTE_WARP_CUH
#define SP_KERNELS_CUDA_MOE_ROUTE_WARP_CUH

#include "kernels/cuda/decode.cuh"

#define SPC_RW_MAX_E 256 /* experts a warp routes: 8 logits a lane */
#define SPC_RW_MAX_K 8

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

/* Lane 0's sequential top-k (rt_top_k's scan; taken as a bit set): the k ids. */
static __device__ void rw_scan(const float *l, int E, int k, int32_t *ids)
{
    uint32_t taken[SPC_RW_MAX_E / 32] = {0};
    for (int j = 0; j < k; j++) {
        int b = -1;
        for (int i = 0; i < E; i++)
            if (!((taken[i >> 5] >> (i & 31)) & 1u) && (b < 0 || l[i] > l[b]))
                b = i;
        ids[j] = b;
        taken[b >> 5] |= 1u << (b & 31);
    }
}

/* The warp's routing of token t: slot `slot`'s expert id, and its weight in *w. Every lane
 * returns the same; lanes of one warp must all call it. */
static __device__ __forceinline__ int32_t spc_route_warp(const spc_route_in &r, int64_t t, int slot,
                                                         float *w)
{
    const int lane = threadIdx.x & 31, per = (r.E + 31) >> 5;
    const float *l = r.logits + t * (int64_t)r.E;
    float v[SPC_RW_MAX_E / 32];
    bool nan = false;
#pragma unroll
    for (int m = 0; m < SPC_RW_MAX_E / 32; m++) {
        const int i = lane + 32 * m;
        v[m] = m < per && i < r.E ? l[i] : 0.0f;
        nan = nan || v[m] != v[m];
    }
    int32_t ids[SPC_RW_MAX_K];
    if (__any_sync(SPC_FULL_MASK, nan)) { /* rare: the sequential scan decides */
        int32_t s[SPC_RW_MAX_K] = {0};
        if (lane == 0)
            rw_scan(l, r.E, r.k, s);
#pragma unroll
        for (int j = 0; j < SPC_RW_MAX_K; j++)
            ids[j] = __shfl_sync(SPC_FULL_MASK, s[j], 0);
    } else {
        /* rank of each of the lane's indices: how many indices beat it */
        int rank[SPC_RW_MAX_E / 32];
#pragma unroll
        for (int m = 0; m < SPC_RW_MAX_E / 32; m++)
            rank[m] = 0;
#pragma unroll
        for (int mo = 0; mo < SPC_RW_MAX_E / 32; mo++) {
            if (mo >= per)
                break;
            for (int src = 0; src < 32; src++) {
                const int io = src + 32 * mo;
                const float o = __shfl_sync(SPC_FULL_MASK, v[mo], src);
#pragma unroll
                for (int m = 0; m < SPC_RW_MAX_E / 32; m++) {
                    const int i = lane + 32 * m;
                    rank[m] += io < r.E && (o > v[m] || (o == v[m] && io < i));
                }
            }
        }
#pragma unroll
        for (int j = 0; j < SPC_RW_MAX_K; j++) {
            ids[j] = 0;
#pragma unroll
            for (int m = 0; m < SPC_RW_MAX_E / 32; m++) {
                const unsigned b =
                    __ballot_sync(SPC_FULL_MASK, m < per && lane + 32 * m < r.E && rank[m] == j);
                if (b)
                    ids[j] = 32 * m + __ffs(b) - 1;
            }
        }
    }
    /* rt_softmax over the chosen values, in slot order */
    float c[SPC_RW_MAX_K], e[SPC_RW_MAX_K];
#pragma unroll
    for (int j = 0; j < SPC_RW_MAX_K; j++)
        c[j] = j < r.k ? l[ids[j]] : 0.0f;
    float mx = c[0];
#pragma unroll
    for (int j = 1; j < SPC_RW_MAX_K; j++)
        if (j < r.k)
            mx = c[j] > mx ? c[j] : mx;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < SPC_RW_MAX_K; j++)
        if (j < r.k) {
            e[j] = expf(__fsub_rn(c[j], mx));
            sum = __fadd_rn(sum, e[j]);
        }
    int32_t id = ids[0];
    float ew = e[0];
#pragma unroll
    for (int j = 1; j < SPC_RW_MAX_K; j++)
        if (j == slot) {
            id = ids[j];
            ew = e[j];
        }
    *w = __fdiv_rn(ew, sum);
    return id;
}

/* Pair p's expert (token p / k, slot p % k); with store, ids[p] and w[p] are written
 * (one block of the launch does it for each pair). */
static __device__ __forceinline__ int32_t spc_route_pair(const spc_route_in &r, int64_t p, bool store)
{
    float w;
    const int32_t id = spc_route_warp(r, p / r.k, (int)(p % r.k), &w);
    if (store && threadIdx.x == 0) {
        r.ids[p] = id;
        r.w[p] = w;
    }
    return id;
}

#endif
