/* attention_avx2.c: the attention inner loop (groups of queries sharing a KV head, see
 * attention_groups.h) with 8 lanes, compiled with -mavx2 -mfma -mf16c (see CMakeLists.txt);
 * called only when cpuid reports them (attention.c). Heads whose dims are multiples of 8
 * (up to 256) take the loop below; others the portable loop of attention_impl.h, compiled
 * here with FMA.
 *
 * Fixed order, whatever else is in the batch:
 *   score j   lane l sums q[8c + l] k_j[8c + l] over chunks c in order (a product, then
 *             FMAs), the 8 lanes are added in simd.h's sp_v8_hsum tree (for 8 keys at
 *             once by a transpose network computing exactly that tree per key), times scale
 *   softmax   max (exact); e_j = exp(s_j - max) by Cephes' degree-6 polynomial, 2^n applied
 *             as two exact power-of-two products (deterministic, within ~2 ulp of expf);
 *             denominator: 8-lane sums over keys in blocks of 8 (the last block padded
 *             with zeros), sp_v8_hsum, then the sink's term
 *   output    o[d] += (e_j * inv) v_j[d] for j ascending, one FMA each (inv = 1 / denom),
 *             64 dims at a time in registers, from o = 0; between blocks of keys the
 *             accumulators wait in the output row */
#include "kernels/cpu/attention_groups.h"
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/exp_avx2.h"

#include <stdbool.h>

#if !SP_SIMD_AVX2
#error "attention_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif

#define INLINE static inline __attribute__((always_inline))

enum { MAX_CHUNKS = 32 }; /* 256 dims */

/* sp_v8_hsum of 8 vectors at once: lane i of the result is sp_v8_hsum(v[i]), bit for bit
 * (the same additions of the same operands, grouped into other instructions). */
INLINE __m256 hsum8_x8(const __m256 v[8])
{
    __m256 c[4], e[2];
    /* lanes l + (l + 4): c[k] = [v2k's four | v2k+1's four] */
    for (int k = 0; k < 4; k++)
        c[k] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x31));
    /* (0+4) + (2+6) and (1+5) + (3+7): per 128-bit half, two vectors' pairs */
    for (int m = 0; m < 2; m++)
        e[m] = _mm256_add_ps(_mm256_shuffle_ps(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* the last addition: lanes hold v0 v2 v4 v6 | v1 v3 v5 v7 */
    __m256 r = _mm256_add_ps(_mm256_shuffle_ps(e[0], e[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(e[0], e[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* e^x: sp_exp8 (exp_avx2.h; softmax arguments are <= 0, -inf gives 0). */

/* Scores of keys [lo, hi) against q (nc chunks), times scale, into s[0 ..). */
INLINE void scores(const int nc, const float *q, const float *k0, int64_t kstride, int64_t lo,
                   int64_t hi, float scale, float *s)
{
    int64_t j = lo;
    for (; j + 8 <= hi; j += 8) {
        __m256 acc[8];
        for (int i = 0; i < 8; i++) {
            const float *k = k0 + (j + i) * kstride;
            acc[i] = _mm256_mul_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(k));
            for (int c = 1; c < nc; c++)
                acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c), _mm256_loadu_ps(k + 8 * c), acc[i]);
        }
        _mm256_storeu_ps(s + (j - lo), _mm256_mul_ps(hsum8_x8(acc), _mm256_set1_ps(scale)));
    }
    for (; j < hi; j++) {
        const float *k = k0 + j * kstride;
        __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(k));
        for (int c = 1; c < nc; c++)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c), _mm256_loadu_ps(k + 8 * c), acc);
        s[j - lo] = sp_v8_hsum(acc) * scale;
    }
}

static float max_of(const float *s, int64_t n, float m)
{
    __m256 mv = _mm256_set1_ps(m);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + i));
    float l[8];
    _mm256_storeu_ps(l, mv);
    for (int k = 0; k < 8; k++)
        m = l[k] > m ? l[k] : m;
    for (; i < n; i++)
        m = s[i] > m ? s[i] : m;
    return m;
}

/* s[0, n) = exp(s - m); returns their sum (8-lane blocks, the last padded with zeros). */
static float softmax_exp(float *s, int64_t n, float m)
{
    __m256 mv = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = sp_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
        _mm256_storeu_ps(s + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) { /* the last keys, the block padded with zeros */
        float t[8];
        for (int k = 0; k < 8; k++)
            t[k] = i + k < n ? s[i + k] - m : -INFINITY;
        _mm256_storeu_ps(t, sp_exp8(_mm256_loadu_ps(t)));
        for (int64_t k = i; k < n; k++)
            s[k] = t[k - i];
        for (int64_t k = n - i; k < 8; k++)
            t[k] = 0.0f;
        sum = _mm256_add_ps(sum, _mm256_loadu_ps(t));
    }
    return sp_v8_hsum(sum);
}

/* o[0, 8 nv) += sum over keys j of p_j v_j (p = s * inv), j ascending, in registers: the
 * accumulators come from out and go back to it (a query's sum runs over several blocks). */
INLINE void weighted_sum(const int nv, const float *s, float inv, const float *v0, int64_t vstride,
                         int64_t n, float *out)
{
    __m256 o[8];
    for (int c = 0; c < nv; c++)
        o[c] = _mm256_loadu_ps(out + 8 * c);
    for (int64_t j = 0; j < n; j++) {
        __m256 p = _mm256_set1_ps(s[j] * inv);
        const float *v = v0 + j * vstride;
        for (int c = 0; c < nv; c++)
            o[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * c), o[c]);
    }
    for (int c = 0; c < nv; c++)
        _mm256_storeu_ps(out + 8 * c, o[c]);
}

/* 1 / the softmax denominator of query q, its scores turned into exp(s - max). */
static float softmax_inv(const sp_attn_args *a, const attn_query *q)
{
    int64_t n = q->hi - q->lo;
    float sink = a->sinks ? a->sinks[q->h] : -INFINITY;
    float m = max_of(q->s, n, sink);
    float denom = softmax_exp(q->s, n, m);
    if (a->sinks) {
        float e[8] = {sink - m};
        _mm256_storeu_ps(e, sp_exp8(_mm256_loadu_ps(e)));
        denom += e[0];
    }
    return 1.0f / denom;
}

INLINE void attend(const int nc, const sp_attn_args *a, const attn_group *g)
{
    const attn_kv kv = attn_kv_of(a, g);
    const int64_t kb = kv.kb;
    int64_t lo, hi;
    for (int64_t jb = g->lo; jb < g->hi; jb += kb)
        for (int i = 0; i < g->n; i++)
            if (attn_in_block(&g->q[i], jb, kb, &lo, &hi))
                scores(nc, g->q[i].q, kv.k, kv.kstride, lo, hi, a->scale,
                       g->q[i].s + (lo - g->q[i].lo));
    float inv[SP_ATTN_GROUP];
    attn_group_softmax(a, g, softmax_inv, inv);
    for (int64_t jb = g->lo; jb < g->hi; jb += kb)
        for (int i = 0; i < g->n; i++) {
            const attn_query *q = &g->q[i];
            if (!attn_in_block(q, jb, kb, &lo, &hi))
                continue;
            const float *s = q->s + (lo - q->lo), *v = kv.v + lo * kv.vstride;
            int64_t d = 0;
            for (; d + 64 <= a->v_dim; d += 64)
                weighted_sum(8, s, inv[i], v + d, kv.vstride, hi - lo, q->out + d);
            if (d < a->v_dim)
                weighted_sum((int)((a->v_dim - d) / 8), s, inv[i], v + d, kv.vstride, hi - lo,
                             q->out + d);
        }
}

/* One instance per common head size: the chunk loops unroll. */
static void attend_8(const sp_attn_args *a, const attn_group *g)
{
    attend(8, a, g);
}

static void attend_16(const sp_attn_args *a, const attn_group *g)
{
    attend(16, a, g);
}

static void attend_any(const sp_attn_args *a, const attn_group *g)
{
    attend((int)(a->qk_dim / 8), a, g);
}

void sp_attn_rows_avx2(const sp_attn_args *a, int64_t b, int64_t e, float *scores);

void sp_attn_rows_avx2(const sp_attn_args *a, int64_t b, int64_t e, float *scores)
{
    bool fits = a->qk_dim % 8 == 0 && a->v_dim % 8 == 0 && a->qk_dim > 0 && a->v_dim > 0 &&
                a->qk_dim <= 8 * MAX_CHUNKS;
    if (!fits) {
        attn_rows(a, b, e, scores);
        return;
    }
    attn_group_fn fn = attend_any;
    if (a->qk_dim == 64)
        fn = attend_8;
    else if (a->qk_dim == 128)
        fn = attend_16;
    attn_rows_grouped(a, b, e, scores, fn);
}
