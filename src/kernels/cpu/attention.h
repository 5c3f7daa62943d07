/* attention.h: causal scaled-dot-product attention over a KV cache, on the CPU.
 *
 * For query token t (absolute position pos0 + t) and head h, the keys are the cached
 * positions j with j <= pos and, when window > 0, j > pos - window. Scores are
 * dot(q, k_j) * scale in key order; softmax runs in fp32 with an optional per-head sink
 * logit in the denominator (gpt-oss); the output is sum_j p_j v_j accumulated in key
 * order. Nothing depends on how many queries share the call: the KV cache holds every
 * position already, so a query's result is the same alone or in a batch. */
#ifndef SP_KERNELS_CPU_ATTENTION_H
#define SP_KERNELS_CPU_ATTENTION_H

#include "util/threadpool.h"
#include <stdint.h>

/* Queries the vector loops run together over each block of keys (attention_groups.h);
 * the scratch holds a score row for each. */
enum { SP_ATTN_GROUP = 8 };

typedef struct sp_attn_args {
    const float *q;       /* [n_tok, n_heads, qk_dim], row stride q_stride floats */
    int64_t q_stride;
    const float *k_cache; /* [n_ctx, n_kv_heads, qk_dim], row stride k_stride */
    const float *v_cache; /* [n_ctx, n_kv_heads, v_dim], row stride v_stride */
    int64_t k_stride, v_stride; /* floats between positions; 0 = n_kv_heads * dim */
    int64_t n_heads, n_kv_heads, qk_dim, v_dim;
    int64_t pos0, n_tok;
    const int32_t *q_pos; /* backend memory [n_tok] holding pos0 + t, or NULL. A backend that
                           * replays recorded work (CUDA graphs) reads positions here, where
                           * they change from pass to pass; pos0 may then be stale. */
    int64_t window;       /* 0 = full causal */
    float scale;
    const float *sinks;   /* [n_heads] or NULL */
    float *out;           /* [n_tok, n_heads, v_dim] */
    float *scratch;       /* n_threads * SP_ATTN_GROUP * n_ctx floats */
    int64_t n_ctx;
} sp_attn_args;

void sp_attention(sp_pool *pool, const sp_attn_args *a);
/* n independent attentions (the sequences of one pass, each over its own KV cache) as one
 * parallel-for over all their (token, head) rows: one wake of the pool instead of one per
 * sequence. a[i].scratch and n_ctx are a[0]'s for all. start: n + 1 entries of scratch
 * for the row offsets. Every row is computed as sp_attention computes it. */
void sp_attention_many(sp_pool *pool, const sp_attn_args *a, int64_t n, int64_t *start);
/* Scalar reference (double accumulation), single-threaded. */
void sp_attention_ref(const sp_attn_args *a);

#endif
