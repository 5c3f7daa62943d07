/* exp_avx2.h: e^x on 8 fp32 lanes by Cephes' expf polynomial, shared by the AVX2
 * attention (softmax) and the AVX2 SwiGLU; included only by files compiled with -mavx2
 * -mfma. Deterministic (the same bits for the same input, in any lane), within ~2 ulp of
 * glibc's expf: x is clamped to [-104, 89], n = round(x / ln 2), the polynomial in
 * r = x - n ln 2 (ln 2 in two parts), and 2^n applied as two exact power-of-two products
 * 2^(n/2) and 2^(n - n/2), so results below FLT_MIN round once to a denormal or zero and
 * results above FLT_MAX become +inf, as expf's do. A NaN input gives a finite value: the
 * callers' arithmetic on x itself carries the NaN. */
#ifndef SP_KERNELS_CPU_EXP_AVX2_H
#define SP_KERNELS_CPU_EXP_AVX2_H

#include <immintrin.h>

static inline __attribute__((always_inline)) __m256 sp_exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* y * 2^n for n in [-150, 128]: 2^(n/2) and 2^(n - n/2) are normal, so the first
     * product is exact and the second rounds once */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, p1), p2);
}

#endif
