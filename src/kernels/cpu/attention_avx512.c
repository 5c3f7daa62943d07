/* attention_avx512.c: the attention inner loop (groups of queries sharing a KV head, see
 * attention_groups.h) with 16 lanes, compiled with AVX-512 F/BW/VL/DQ (see CMakeLists.txt);
 * called only when cpuid reports them (attention.c). Heads of up to 128 dims (qk and v,
 * multiples of 16) take this path; others the AVX2 loop.
 *
 * Fixed order, whatever else is in the batch:
 *   score j   lane l sums q[16c + l] k_j[16c + l] over chunks c in order (FMA), the 16
 *             lanes are added in hsum16's tree (for 16 keys at once by a transpose
 *             network computing exactly that tree per key), times scale
 *   softmax   max (exact); e_j = exp(s_j - max) by a degree-6 polynomial and scalef
 *             (deterministic, within ~2 ulp of expf); denominator: 16-lane sums over
 *             keys in blocks of 16 (the last block padded with zeros), hsum16, then the
 *             sink's term
 *   output    o[d] += (e_j / denom) v_j[d] for j ascending, one FMA each, as the AVX2
 *             loop does (inv = 1 / denom, p = e_j * inv), from o = 0; between blocks of
 *             keys the accumulators wait in the output row */
#include "kernels/cpu/attention_groups.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#define INLINE static inline __attribute__((always_inline))

enum { MAX_CHUNKS = 8 }; /* 128 dims */

INLINE float hsum16(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 0x55));
    return _mm_cvtss_f32(b);
}

/* hsum16 of 16 vectors at once: lane i of the result is hsum16(v[i]), bit for bit (the
 * same additions of the same operands; only their grouping into instructions differs). */
INLINE __m512 hsum16_x16(const __m512 v[16])
{
    __m512 c[8], e[4], g[2];
    /* lanes i + (i + 8): c[k] = [v2k lo8 | v2k+1 lo8] */
    for (int k = 0; k < 8; k++) {
        __m512 a = v[2 * k], b = v[2 * k + 1];
        c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    /* lanes i + (i + 4): e[m] quarters = v4m .. v4m+3 */
    for (int m = 0; m < 4; m++)
        e[m] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* lanes i + (i + 2) */
    for (int p = 0; p < 2; p++)
        g[p] = _mm512_add_ps(_mm512_shuffle_ps(e[2 * p], e[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(e[2 * p], e[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lanes 0 + 1: quarter q holds v[q], v[4 + q], v[8 + q], v[12 + q] */
    __m512 r = _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* lane 4q + j holds v[4j + q]: transpose the 4 x 4 */
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(perm, r);
}

/* e^x for x <= 0 (softmax arguments; -inf gives 0): Cephes' expf polynomial. */
INLINE __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, n);
}

/* Scores of keys [lo, hi) against q (nc chunks in qv), times scale, into s[0 ..). */
INLINE void scores(const int nc, const __m512 *qv, const float *k0, int64_t kstride, int64_t lo,
                   int64_t hi, float scale, float *s)
{
    int64_t j = lo;
    for (; j + 16 <= hi; j += 16) {
        __m512 acc[16];
        for (int i = 0; i < 16; i++) {
            const float *k = k0 + (j + i) * kstride;
            acc[i] = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
            for (int c = 1; c < nc; c++)
                acc[i] = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(k + 16 * c), acc[i]);
        }
        _mm512_storeu_ps(s + (j - lo), _mm512_mul_ps(hsum16_x16(acc), _mm512_set1_ps(scale)));
    }
    for (; j < hi; j++) {
        const float *k = k0 + j * kstride;
        __m512 acc = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
        for (int c = 1; c < nc; c++)
            acc = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(k + 16 * c), acc);
        s[j - lo] = hsum16(acc) * scale;
    }
}

/* s[0, n) = exp(s - m); returns their sum (16-lane blocks, hsum16). */
static float softmax_exp(float *s, int64_t n, float m)
{
    __m512 mv = _mm512_set1_ps(m), sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), mv));
        e = _mm512_maskz_mov_ps(k, e);
        _mm512_mask_storeu_ps(s + i, k, e);
        sum = _mm512_add_ps(sum, e);
    }
    return hsum16(sum);
}

static float max_of(const float *s, int64_t n, float m)
{
    __m512 mv = _mm512_set1_ps(m);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        mv = _mm512_max_ps(mv, _mm512_loadu_ps(s + i));
    m = _mm512_reduce_max_ps(mv);
    for (; i < n; i++)
        m = s[i] > m ? s[i] : m;
    return m;
}

/* 1 / the softmax denominator of query q, its scores turned into exp(s - max). */
static float softmax_inv(const sp_attn_args *a, const attn_query *q)
{
    int64_t n = q->hi - q->lo;
    float sink = a->sinks ? a->sinks[q->h] : -INFINITY;
    float m = max_of(q->s, n, sink);
    float denom = softmax_exp(q->s, n, m);
    if (a->sinks) {
        float e[16] = {sink - m};
        _mm512_storeu_ps(e, exp16(_mm512_loadu_ps(e)));
        denom += e[0];
    }
    return 1.0f / denom;
}

/* out[0, 16 nv) += sum over keys [0, n) of (s_j inv) v_j, j ascending, one FMA each. */
INLINE void weighted_sum(const int nv, const float *s, float inv, const float *v0, int64_t vstride,
                         int64_t n, float *out)
{
    __m512 o[MAX_CHUNKS];
    for (int c = 0; c < nv; c++)
        o[c] = _mm512_loadu_ps(out + 16 * c);
    for (int64_t j = 0; j < n; j++) {
        __m512 p = _mm512_set1_ps(s[j] * inv);
        const float *v = v0 + j * vstride;
        for (int c = 0; c < nv; c++)
            o[c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 16 * c), o[c]);
    }
    for (int c = 0; c < nv; c++)
        _mm512_storeu_ps(out + 16 * c, o[c]);
}

INLINE void attend(const int nc, const int nv, const sp_attn_args *a, const attn_group *g)
{
    const attn_kv kv = attn_kv_of(a, g);
    const int64_t kb = kv.kb;
    int64_t lo, hi;
    for (int64_t jb = g->lo; jb < g->hi; jb += kb)
        for (int i = 0; i < g->n; i++) {
            const attn_query *q = &g->q[i];
            if (!attn_in_block(q, jb, kb, &lo, &hi))
                continue;
            __m512 qv[MAX_CHUNKS];
            for (int c = 0; c < nc; c++)
                qv[c] = _mm512_loadu_ps(q->q + 16 * c);
            scores(nc, qv, kv.k, kv.kstride, lo, hi, a->scale, q->s + (lo - q->lo));
        }
    float inv[SP_ATTN_GROUP];
    attn_group_softmax(a, g, softmax_inv, inv);
    for (int64_t jb = g->lo; jb < g->hi; jb += kb)
        for (int i = 0; i < g->n; i++) {
            const attn_query *q = &g->q[i];
            if (attn_in_block(q, jb, kb, &lo, &hi))
                weighted_sum(nv, q->s + (lo - q->lo), inv[i], kv.v + lo * kv.vstride, kv.vstride,
                             hi - lo, q->out);
        }
}

/* One instance per head size: the chunk loops unroll and the accumulators stay in
 * registers. */
#define ATTEND_FN(NC, NV)                                                                      \
    static void attend_##NC##_##NV(const sp_attn_args *a, const attn_group *g)                 \
    {                                                                                          \
        attend(NC, NV, a, g);                                                                  \
    }
ATTEND_FN(4, 4)
ATTEND_FN(8, 8)

static void attend_any(const sp_attn_args *a, const attn_group *g)
{
    attend((int)(a->qk_dim / 16), (int)(a->v_dim / 16), a, g);
}

bool sp_attn_avx512_fits(const sp_attn_args *a);
void sp_attn_rows_avx512(const sp_attn_args *a, int64_t b, int64_t e, float *scores);

bool sp_attn_avx512_fits(const sp_attn_args *a)
{
    return a->qk_dim % 16 == 0 && a->v_dim % 16 == 0 && a->qk_dim > 0 && a->v_dim > 0 &&
           a->qk_dim <= 16 * MAX_CHUNKS && a->v_dim <= 16 * MAX_CHUNKS;
}

void sp_attn_rows_avx512(const sp_attn_args *a, int64_t b, int64_t e, float *scores)
{
    attn_group_fn fn = attend_any;
    if (a->qk_dim == 64 && a->v_dim == 64)
        fn = attend_4_4;
    else if (a->qk_dim == 128 && a->v_dim == 128)
        fn = attend_8_8;
    attn_rows_grouped(a, b, e, scores, fn);
}
