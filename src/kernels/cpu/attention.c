/* attention.c: causal attention over the KV cache (see attention.h): the portable inner
 * loop, the AVX2 one (attention_avx2.c) or the AVX-512 one (attention_avx512.c, heads of
 * up to 128 dims) when cpuid allows, the reference. */
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/cpu_isa.h"

#include <stdbool.h>

#ifdef SP_HAVE_AVX2_KERNELS
void sp_attn_rows_avx2(const sp_attn_args *a, int64_t b, int64_t e, float *scores);
#endif
#ifdef SP_HAVE_AVX512_KERNELS
bool sp_attn_avx512_fits(const sp_attn_args *a);
void sp_attn_rows_avx512(const sp_attn_args *a, int64_t b, int64_t e, float *scores);
#endif

static void attn_task(void *ctx, int64_t b, int64_t e, int thread)
{
    const sp_attn_args *a = ctx;
    float *scores = a->scratch + (int64_t)thread * SP_ATTN_GROUP * a->n_ctx;
#ifdef SP_HAVE_AVX512_KERNELS
    if (sp_isa_active() >= SP_ISA_AVX512 && sp_attn_avx512_fits(a)) {
        sp_attn_rows_avx512(a, b, e, scores);
        return;
    }
#endif
#ifdef SP_HAVE_AVX2_KERNELS
    if (sp_isa_active() >= SP_ISA_AVX2) {
        sp_attn_rows_avx2(a, b, e, scores);
        return;
    }
#endif
    attn_rows(a, b, e, scores);
}

/* Rows a chunk of the parallel-for is a multiple of: the query heads of a KV head, whose
 * rows the vector loops run together (attention_groups.h), unless that leaves fewer than
 * two chunks a thread (a decode step of a model with few KV heads). Timing only: a row's
 * result does not depend on its chunk. */
static int64_t attn_grain(sp_pool *pool, const sp_attn_args *a, int64_t rows)
{
    int64_t g = a->n_kv_heads > 0 ? a->n_heads / a->n_kv_heads : 1;
    while (g > 1 && rows / g < 2 * (int64_t)sp_pool_n_threads(pool))
        g = (g + 1) / 2;
    return g;
}

void sp_attention(sp_pool *pool, const sp_attn_args *a)
{
    /* small attention (short contexts, tiny models) is not worth waking the workers */
    int64_t work = a->n_tok * a->n_heads * (a->pos0 + a->n_tok) * (a->qk_dim + a->v_dim);
    int64_t rows = a->n_tok * a->n_heads;
    sp_pool_run(work < (1 << 16) ? NULL : pool, rows, attn_grain(pool, a, rows), attn_task,
                (void *)a);
}

typedef struct attn_many {
    const sp_attn_args *a;
    const int64_t *start; /* [n + 1]: first row of each attention in the joint grid */
    int64_t n;
} attn_many;

static void attn_many_task(void *ctx, int64_t b, int64_t e, int thread)
{
    const attn_many *m = ctx;
    int64_t i = 0;
    while (m->start[i + 1] <= b)
        i++;
    for (; i < m->n && b < e; i++) {
        int64_t hi = e < m->start[i + 1] ? e : m->start[i + 1];
        if (hi > b) {
            sp_attn_args a = m->a[i];
            a.scratch = m->a[0].scratch;
            a.n_ctx = m->a[0].n_ctx;
            attn_task(&a, b - m->start[i], hi - m->start[i], thread);
        }
        b = hi;
    }
}

void sp_attention_many(sp_pool *pool, const sp_attn_args *a, int64_t n, int64_t *start)
{
    int64_t work = 0;
    start[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        start[i + 1] = start[i] + a[i].n_tok * a[i].n_heads;
        work += a[i].n_tok * a[i].n_heads * (a[i].pos0 + a[i].n_tok) * (a[i].qk_dim + a[i].v_dim);
    }
    attn_many m = {a, start, n};
    sp_pool_run(work < (1 << 16) ? NULL : pool, start[n], n > 0 ? attn_grain(pool, a, start[n]) : 1,
                attn_many_task, &m);
}

void sp_attention_ref(const sp_attn_args *a)
{
    for (int64_t t = 0; t < a->n_tok; t++)
        for (int64_t h = 0; h < a->n_heads; h++) {
            int64_t pos = a->pos0 + t, lo = 0;
            if (a->window > 0 && pos - a->window + 1 > 0)
                lo = pos - a->window + 1;
            int64_t kvh = h / (a->n_heads / a->n_kv_heads);
            const float *q = a->q + t * a->q_stride + h * a->qk_dim;
            int64_t ks = a->k_stride ? a->k_stride : a->n_kv_heads * a->qk_dim;
            int64_t vs = a->v_stride ? a->v_stride : a->n_kv_heads * a->v_dim;
            double m = a->sinks ? a->sinks[h] : -INFINITY;
            for (int64_t j = lo; j <= pos; j++) {
                const float *k = a->k_cache + j * ks + kvh * a->qk_dim;
                double s = 0;
                for (int64_t d = 0; d < a->qk_dim; d++)
                    s += (double)q[d] * k[d];
                s *= a->scale;
                if (s > m)
                    m = s;
            }
            double denom = a->sinks ? exp(a->sinks[h] - m) : 0.0;
            for (int64_t j = lo; j <= pos; j++) {
                const float *k = a->k_cache + j * ks + kvh * a->qk_dim;
                double s = 0;
                for (int64_t d = 0; d < a->qk_dim; d++)
                    s += (double)q[d] * k[d];
                denom += exp(s * a->scale - m);
            }
            float *o = a->out + (t * a->n_heads + h) * a->v_dim;
            for (int64_t d = 0; d < a->v_dim; d++) {
                double acc = 0;
                for (int64_t j = lo; j <= pos; j++) {
                    const float *k = a->k_cache + j * ks + kvh * a->qk_dim;
                    const float *v = a->v_cache + j * vs + kvh * a->v_dim;
                    double s = 0;
                    for (int64_t e = 0; e < a->qk_dim; e++)
                        s += (double)q[e] * k[e];
                    acc += exp(s * a->scale - m) / denom * v[d];
                }
                o[d] = (float)acc;
            }
        }
}
