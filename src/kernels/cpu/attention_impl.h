/* attention_impl.h: the attention inner loop (one query token x one head), written once
 * over simd.h's sp_v8 and compiled twice: by attention.c (portable C) and by
 * attention_avx2.c (AVX2 + FMA), picked at run time like the matmul kernels. Included by
 * exactly those files. */
#include "kernels/cpu/attention.h"
#include "kernels/cpu/simd.h"

#include <math.h>

static void attend_one(const sp_attn_args *a, int64_t t, int64_t h, float *scores)
{
    int64_t pos = a->pos0 + t;
    int64_t lo = 0;
    if (a->window > 0 && pos - a->window + 1 > 0)
        lo = pos - a->window + 1;
    int64_t kvh = h / (a->n_heads / a->n_kv_heads);
    const float *q = a->q + t * a->q_stride + h * a->qk_dim;
    int64_t kstride = a->k_stride ? a->k_stride : a->n_kv_heads * a->qk_dim;
    int64_t vstride = a->v_stride ? a->v_stride : a->n_kv_heads * a->v_dim;
    float m = -INFINITY;
    for (int64_t j = lo; j <= pos; j++) {
        float s = sp_dot_f32(q, a->k_cache + j * kstride + kvh * a->qk_dim, a->qk_dim) *
                  a->scale;
        scores[j - lo] = s;
        if (s > m)
            m = s;
    }
    float sink = a->sinks ? a->sinks[h] : -INFINITY;
    if (sink > m)
        m = sink;
    float denom = 0.0f;
    for (int64_t j = lo; j <= pos; j++) {
        float e = expf(scores[j - lo] - m);
        scores[j - lo] = e;
        denom += e;
    }
    if (a->sinks)
        denom += expf(sink - m);
    float inv = 1.0f / denom;
    float *o = a->out + (t * a->n_heads + h) * a->v_dim;
    for (int64_t d = 0; d < a->v_dim; d++)
        o[d] = 0.0f;
    for (int64_t j = lo; j <= pos; j++) {
        float p = scores[j - lo] * inv;
        const float *v = a->v_cache + j * vstride + kvh * a->v_dim;
        int64_t d = 0;
        sp_v8 pv = sp_v8_set1(p);
        for (; d + 8 <= a->v_dim; d += 8)
            sp_v8_store(o + d, sp_v8_fmadd(pv, sp_v8_load(v + d), sp_v8_load(o + d)));
        for (; d < a->v_dim; d++)
            o[d] += p * v[d];
    }
}


/* Rows [b, e) of the (token, head) grid. */
static void attn_rows(const sp_attn_args *a, int64_t b, int64_t e, float *scores)
{
    for (int64_t i = b; i < e; i++)
        attend_one(a, i / a->n_heads, i % a->n_heads, scores);
}
