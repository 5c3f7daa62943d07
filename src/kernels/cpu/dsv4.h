/* dsv4.h: the DeepSeek-V4 kernels on the CPU, written as scalar references (fp32, fixed
 * reduction order, one row at a time, so a row never depends on its batch). The math is
 * transformers 5.17's DeepseekV4 (docs/DEEPSEEK_V4.md):
 *
 *   hyper-connections   hc_weights (pre/post/comb from the mixed row, Sinkhorn-Knopp on
 *                       comb), hc_collapse (sum_k pre_k s_k), hc_expand (post_k y + sum_j
 *                       comb[j][k] s_j)
 *   rope_tail           interleaved RoPE on the trailing rot dims of each head, kept
 *                       interleaved (or its inverse, sin negated)
 *   compress            one compressed entry: per-channel softmax over the window's gated
 *                       slots (+ the previous window's first half for CSA), weighted sum,
 *                       RMSNorm, RoPE at the window's first position
 *   index_topk          lightning indexer: sum_h w_h relu(q_h . k_s), top-k among the
 *                       entries the query may see, ascending, -1 padded
 *   attention           sliding-window keys plus chosen compressed entries (K = V, one
 *                       head shared by all), per-head sink in the softmax denominator
 *   swiglu_limit        silu(min(g, L)) * clamp(u, -L, L) */
#ifndef SP_KERNELS_CPU_DSV4_H
#define SP_KERNELS_CPU_DSV4_H

#include "kernels/cpu/topk_torch.h"

#include <stdbool.h>
#include <stdint.h>

/* mix [(2 + N) N] (head: [N]) -> pre [N], post [N], comb [N, N]; head mode when post is NULL
 * (pre = sigmoid(mix * scale[0] + base) + eps). */
void sp_hc_weights(const float *mix, const float *base, const float *scale, int64_t N,
                   int64_t iters, float eps, float *pre, float *post, float *comb);
/* streams [N, H] -> out [H] = sum_k pre[k] * streams[k]. */
void sp_hc_collapse(const float *streams, const float *pre, int64_t N, int64_t H, float *out);
/* out [N, H] = post[k] * y + sum_j comb[j][k] * streams[j]; out must not alias streams. */
void sp_hc_expand(const float *streams, const float *y, const float *post, const float *comb,
                  int64_t N, int64_t H, float *out);
/* x: one head's trailing rot dims, pairs (x[2i], x[2i+1]); cs: [rot/2] cos, [rot/2] sin. */
void sp_rope_tail(float *x, int64_t rot, const float *cs, bool inverse);

typedef struct sp_compress_args {
    const float *kv, *gate;  /* raw rows of the window's positions, row stride `stride` */
    int64_t stride;
    const float *ape;        /* [rate, width] position bias (width = 2 hd with overlap) */
    int64_t rate, hd;
    bool overlap;            /* CSA: entry w also weighs window w-1's first halves */
    const float *norm;       /* [hd] */
    float eps;
    int64_t rot;             /* trailing RoPE dims */
} sp_compress_args;
/* Entry w into out [hd]; cs: the RoPE row of position w * rate. */
void sp_compress_entry(const sp_compress_args *a, int64_t w, const float *cs, float *out);

typedef struct sp_index_args {
    const float *q;       /* [n_heads, hd] one query */
    const float *w;       /* [n_heads] weights_proj row */
    const float *keys;    /* entries, row stride key_stride */
    int64_t key_stride, n_heads, hd, n_valid, topk;
    int64_t n_queue;      /* entries torch.topk sees (invalid ones at -inf); see below */
} sp_index_args;
/* sel [topk]: the chosen entries ascending, then -1; q: max(n_queue, n_valid) elements of
 * scratch. The choice among equal scores is torch.topk's (topk_torch.h) over a queue of
 * n_queue scores. transformers scores a query against every entry of its pass, the
 * future ones at -inf, so its ties depend on the pass length; the engine passes n_queue =
 * n_valid, what transformers does when decoding, so that a position's choice never
 * depends on its batch (docs/DEEPSEEK_V4.md, "Ties"). */
void sp_index_topk(const sp_index_args *a, int32_t *sel, sp_topk_elem *q);

/* The indexer over n_tok queries at positions pos0.. : query t sees entries
 * w < (pos0 + t + 1) / rate and writes sel [t * topk ..]. */
typedef struct sp_index_batch {
    const float *q, *w;   /* [n_tok, n_heads * hd], [n_tok, n_heads] */
    const float *keys;    /* entries, row stride key_stride */
    int64_t key_stride, n_heads, hd, topk, rate, pos0, n_tok;
    int64_t n_queue;      /* sp_index_args.n_queue for every query (0: each its own) */
    int32_t *sel;         /* [n_tok, topk] */
} sp_index_batch;

typedef struct sp_dsv4_attn_args {
    const float *q;        /* [n_tok, n_heads, hd], row stride q_stride */
    int64_t q_stride, n_heads, hd;
    const float *kv;       /* per-position rows (K = V), row stride kv_stride */
    int64_t kv_stride;
    const float *comp;     /* compressed entries, row stride comp_stride, or NULL */
    int64_t comp_stride;
    int64_t rate;          /* compression rate (HCA: entries w < (pos + 1) / rate seen) */
    const int32_t *sel;    /* CSA: [n_tok, n_sel] chosen entries (-1 = none), else NULL */
    int64_t n_sel;
    int64_t pos0, n_tok, window;
    float scale;
    const float *sinks;    /* [n_heads] */
    float *out;            /* [n_tok, n_heads, hd] */
    float *scratch;        /* window + max entries floats */
} sp_dsv4_attn_args;
/* rows: scratch for window + max entries key pointers. */
void sp_dsv4_attention(const sp_dsv4_attn_args *a, const float **rows);

void sp_swiglu_limit(const float *gate, const float *up, int64_t n, float limit, float *out);

#endif
