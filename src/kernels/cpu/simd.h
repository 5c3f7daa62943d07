/* simd.h: an 8-lane float vector used by every CPU reduction.
 *
 * Determinism contract: a reduction over n elements accumulates lanes l = k mod 8 for the
 * first 8*floor(n/8) elements (one fused multiply-add per element when the CPU has FMA,
 * else a multiply then an add), sums the 8 lanes in a fixed tree, then adds the tail
 * elements in order. Every kernel uses this shape whatever the batch size, so a value's
 * rounding never depends on which other tokens share the batch.
 *
 * Two implementations: AVX2 (+FMA, F16C) when the compiler targets them, and portable C. */
#ifndef SP_KERNELS_CPU_SIMD_H
#define SP_KERNELS_CPU_SIMD_H

#include <stdint.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SP_SIMD_AVX2 1
#include <immintrin.h>
typedef __m256 sp_v8;
static inline sp_v8 sp_v8_zero(void) { return _mm256_setzero_ps(); }
static inline sp_v8 sp_v8_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void sp_v8_store(float *p, sp_v8 v) { _mm256_storeu_ps(p, v); }
static inline sp_v8 sp_v8_set1(float f) { return _mm256_set1_ps(f); }
/* a*b + c */
static inline sp_v8 sp_v8_fmadd(sp_v8 a, sp_v8 b, sp_v8 c) { return _mm256_fmadd_ps(a, b, c); }
static inline sp_v8 sp_v8_add(sp_v8 a, sp_v8 b) { return _mm256_add_ps(a, b); }
static inline sp_v8 sp_v8_mul(sp_v8 a, sp_v8 b) { return _mm256_mul_ps(a, b); }
static inline sp_v8 sp_v8_load_bf16(const void *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline sp_v8 sp_v8_load_f16(const void *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline float sp_v8_hsum(sp_v8 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);                    /* l0+l4, l1+l5, l2+l6, l3+l7 */
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));           /* (0+4)+(2+6), (1+5)+(3+7) */
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
}
#else
#define SP_SIMD_AVX2 0
#include "util/dtype.h"
typedef struct {
    float v[8];
} sp_v8;
static inline sp_v8 sp_v8_zero(void)
{
    sp_v8 r;
    memset(&r, 0, sizeof r);
    return r;
}
static inline sp_v8 sp_v8_load(const float *p)
{
    sp_v8 r;
    memcpy(r.v, p, sizeof r.v);
    return r;
}
static inline void sp_v8_store(float *p, sp_v8 v) { memcpy(p, v.v, sizeof v.v); }
static inline sp_v8 sp_v8_set1(float f)
{
    sp_v8 r;
    for (int i = 0; i < 8; i++)
        r.v[i] = f;
    return r;
}
static inline sp_v8 sp_v8_fmadd(sp_v8 a, sp_v8 b, sp_v8 c)
{
    for (int i = 0; i < 8; i++)
        c.v[i] = c.v[i] + a.v[i] * b.v[i];
    return c;
}
static inline sp_v8 sp_v8_add(sp_v8 a, sp_v8 b)
{
    for (int i = 0; i < 8; i++)
        a.v[i] += b.v[i];
    return a;
}
static inline sp_v8 sp_v8_mul(sp_v8 a, sp_v8 b)
{
    for (int i = 0; i < 8; i++)
        a.v[i] *= b.v[i];
    return a;
}
static inline sp_v8 sp_v8_load_bf16(const void *p)
{
    uint16_t h[8];
    memcpy(h, p, sizeof h);
    sp_v8 r;
    for (int i = 0; i < 8; i++)
        r.v[i] = sp_bf16_to_f32(h[i]);
    return r;
}
static inline sp_v8 sp_v8_load_f16(const void *p)
{
    uint16_t h[8];
    memcpy(h, p, sizeof h);
    sp_v8 r;
    for (int i = 0; i < 8; i++)
        r.v[i] = sp_f16_to_f32(h[i]);
    return r;
}
static inline float sp_v8_hsum(sp_v8 a)
{
    float s0 = a.v[0] + a.v[4], s1 = a.v[1] + a.v[5], s2 = a.v[2] + a.v[6], s3 = a.v[3] + a.v[7];
    return (s0 + s2) + (s1 + s3);
}
#endif

/* Fixed-order dot product of two float vectors (the contract above). */
static inline float sp_dot_f32(const float *a, const float *b, int64_t n)
{
    sp_v8 acc = sp_v8_zero();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        acc = sp_v8_fmadd(sp_v8_load(a + k), sp_v8_load(b + k), acc);
    float s = sp_v8_hsum(acc);
    for (; k < n; k++)
        s += a[k] * b[k];
    return s;
}

/* Fixed-order sum of squares. */
static inline float sp_sumsq_f32(const float *a, int64_t n)
{
    return sp_dot_f32(a, a, n);
}

#endif
