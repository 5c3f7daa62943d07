/* sample_avx2.c: a draw's weights (kernels/sample_row.h) four at a time, compiled with
 * -mavx2 (see CMakeLists.txt) and called by runtime/sampler.c only when cpuid reports it.
 * The same operations as sp_sample_weight and sp_sample_exp in the same order (separate
 * multiplies and adds: no FMA, the build contracts none), so every weight has the scalar
 * bits; the vocabulary's tail goes through the scalar code. */
#include "kernels/sample_row.h"

#include <immintrin.h>
#include <stdint.h>

void sp_sample_weights_avx2(const float *l, int64_t V, float lmax, double inv_t, double m,
                            double *w);

/* exp(z) of sample_row.h for four z in (-700, 0] (other lanes: garbage, masked later). */
static inline __attribute__((always_inline)) __m256d exp4(__m256d z)
{
    const __m256d sh = _mm256_set1_pd(6755399441055744.0);
    const __m256d kd = _mm256_sub_pd(_mm256_add_pd(_mm256_mul_pd(z, _mm256_set1_pd(1.4426950408889634074)), sh), sh);
    const __m256d r = _mm256_sub_pd(_mm256_sub_pd(z, _mm256_mul_pd(kd, _mm256_set1_pd(6.93147180369123816490e-01))),
                                    _mm256_mul_pd(kd, _mm256_set1_pd(1.90821492927058770002e-10)));
    static const double c[13] = {2.08767569878680989792e-09, 2.50521083854417187751e-08,
                                 2.75573192239858906526e-07, 2.75573192239858906526e-06,
                                 2.48015873015873015873e-05, 1.98412698412698412698e-04,
                                 1.38888888888888888889e-03, 8.33333333333333333333e-03,
                                 4.16666666666666666667e-02, 1.66666666666666666667e-01,
                                 0.5, 1.0, 1.0};
    __m256d p = _mm256_set1_pd(c[0]);
    for (int k = 1; k < 13; k++)
        p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(c[k]));
    const __m256i k64 = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(kd));
    const __m256i bits = _mm256_slli_epi64(_mm256_add_epi64(k64, _mm256_set1_epi64x(1023)), 52);
    return _mm256_mul_pd(p, _mm256_castsi256_pd(bits));
}

void sp_sample_weights_avx2(const float *l, int64_t V, float lmax, double inv_t, double m,
                            double *w)
{
    const __m256d vmax = _mm256_set1_pd((double)lmax), vt = _mm256_set1_pd(inv_t),
                  vm = _mm256_set1_pd(m), lo = _mm256_set1_pd(-700.0), one = _mm256_set1_pd(1.0);
    int64_t i = 0;
    for (; i + 4 <= V; i += 4) {
        const __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(l + i));
        const __m256d z = _mm256_sub_pd(_mm256_mul_pd(x, vt), vm);
        __m256d e = _mm256_and_pd(exp4(z), _mm256_cmp_pd(z, lo, _CMP_GT_OQ)); /* 0 below, NaN z */
        e = _mm256_blendv_pd(e, one, _mm256_cmp_pd(x, vmax, _CMP_EQ_OQ));
        _mm256_storeu_pd(w + i, _mm256_and_pd(e, _mm256_cmp_pd(x, x, _CMP_ORD_Q))); /* NaN: 0 */
    }
    for (; i < V; i++)
        w[i] = l[i] == l[i] ? sp_sample_weight(l[i], lmax, inv_t, m) : 0.0;
}
