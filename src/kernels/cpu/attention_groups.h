/* attention_groups.h: the (token, head) rows of an attention gathered into groups of
 * queries that read the same key and value rows, for the vector loops (attention_avx2.c,
 * attention_avx512.c; included by exactly those files).
 *
 * A group is up to SP_ATTN_GROUP queries of one KV head: the query heads sharing it
 * (grouped-query attention) at one or a few consecutive tokens. The loops walk the keys
 * in blocks small enough for L1 and run every query of the group over a block before the
 * next, so a key or value row comes from L2 or memory once per group instead of once per
 * query. Each query's arithmetic is that of the query alone (its scores, its softmax, its
 * weighted sum in key order with the accumulators carried across blocks through its
 * output row): grouping changes which rows are in cache, never a result's bits. */
#ifndef SP_KERNELS_CPU_ATTENTION_GROUPS_H
#define SP_KERNELS_CPU_ATTENTION_GROUPS_H

#include "kernels/cpu/attention.h"

#include <stdbool.h>
#include <string.h>

typedef struct attn_query {
    const float *q; /* [qk_dim] */
    float *out;     /* [v_dim] */
    float *s;       /* its scores: scratch row of n_ctx floats */
    int64_t h;      /* query head */
    int64_t lo, hi; /* keys [lo, hi) */
} attn_query;

typedef struct attn_group {
    int n;
    int64_t kvh;
    int64_t lo, hi; /* union of the queries' key ranges */
    attn_query q[SP_ATTN_GROUP];
} attn_group;

typedef void (*attn_group_fn)(const sp_attn_args *a, const attn_group *g);

static inline void attn_group_add(const sp_attn_args *a, attn_group *g, int64_t t, int64_t h,
                                  float *scratch)
{
    attn_query *q = &g->q[g->n];
    int64_t pos = a->pos0 + t, lo = 0;
    if (a->window > 0 && pos - a->window + 1 > 0)
        lo = pos - a->window + 1;
    q->q = a->q + t * a->q_stride + h * a->qk_dim;
    q->out = a->out + (t * a->n_heads + h) * a->v_dim;
    q->s = scratch + g->n * a->n_ctx;
    q->h = h;
    q->lo = lo;
    q->hi = pos + 1;
    g->lo = g->n == 0 || lo < g->lo ? lo : g->lo;
    g->hi = g->n == 0 || pos + 1 > g->hi ? pos + 1 : g->hi;
    g->n++;
}

/* Rows [b, e) of the (token, head) grid (row = t * n_heads + h), as groups; scratch:
 * SP_ATTN_GROUP rows of n_ctx floats. */
static inline void attn_rows_grouped(const sp_attn_args *a, int64_t b, int64_t e, float *scratch,
                                     attn_group_fn fn)
{
    const int64_t H = a->n_heads, per = H / a->n_kv_heads;
    const int64_t hb = per < SP_ATTN_GROUP ? per : SP_ATTN_GROUP; /* heads a group */
    const int64_t tb = SP_ATTN_GROUP / hb;                         /* tokens a group */
    for (int64_t t0 = b / H; t0 * H < e; t0 += tb)
        for (int64_t h0 = 0, h1; h0 < H; h0 = h1) {
            attn_group g = {.kvh = h0 / per};
            h1 = h0 + hb < (g.kvh + 1) * per ? h0 + hb : (g.kvh + 1) * per;
            for (int64_t t = t0; t < t0 + tb && t < a->n_tok; t++)
                for (int64_t h = h0; h < h1; h++)
                    if (t * H + h >= b && t * H + h < e)
                        attn_group_add(a, &g, t, h, scratch);
            if (g.n)
                fn(a, &g);
        }
}

/* Keys a block for rows of `row_floats` floats: about 8 KiB of rows, a multiple of 8. The
 * cache's rows are a position apart (1 KiB for 4 KV heads of 64 dims), so a block's lines
 * fall in a few of L1's sets: 16 KiB blocks of them did not stay in L1, 8 and 4 KiB did. */
static inline int64_t attn_block_keys(int64_t row_floats)
{
    int64_t n = 2048 / (row_floats > 0 ? row_floats : 1);
    return n < 8 ? 8 : n & ~(int64_t)7;
}

/* Where a group's key and value rows are: row j at k + j * kstride (v + j * vstride), and
 * the keys a block (attn_block_keys). */
typedef struct attn_kv {
    const float *k, *v;
    int64_t kstride, vstride, kb;
} attn_kv;

static inline attn_kv attn_kv_of(const sp_attn_args *a, const attn_group *g)
{
    attn_kv r = {a->k_cache + g->kvh * a->qk_dim, a->v_cache + g->kvh * a->v_dim,
                 a->k_stride ? a->k_stride : a->n_kv_heads * a->qk_dim,
                 a->v_stride ? a->v_stride : a->n_kv_heads * a->v_dim,
                 attn_block_keys(a->qk_dim > a->v_dim ? a->qk_dim : a->v_dim)};
    return r;
}

/* The keys of block [jb, jb + kb) that query q reads: [*lo, *hi), false when none. */
static inline bool attn_in_block(const attn_query *q, int64_t jb, int64_t kb, int64_t *lo,
                                 int64_t *hi)
{
    *lo = jb > q->lo ? jb : q->lo;
    *hi = jb + kb < q->hi ? jb + kb : q->hi;
    return *lo < *hi;
}

/* Between the scores and the weighted sums: each query's scores turned into exp(s - max)
 * and 1 / their denominator (with the sink) into inv[i] by the level's softmax_inv, and
 * its output row zeroed, where the weighted sum's blocks accumulate. */
typedef float (*attn_softmax_fn)(const sp_attn_args *a, const attn_query *q);

static inline void attn_group_softmax(const sp_attn_args *a, const attn_group *g,
                                      attn_softmax_fn softmax_inv, float *inv)
{
    for (int i = 0; i < g->n; i++) {
        inv[i] = softmax_inv(a, &g->q[i]);
        memset(g->q[i].out, 0, (size_t)a->v_dim * sizeof(float));
    }
}

#endif
