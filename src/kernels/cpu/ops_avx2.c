/* ops_avx2.c: element-wise ops on 8 lanes, compiled with -mavx2 -mfma -mf16c (see
 * CMakeLists.txt); called by ops.c only when cpuid reports them (cpu_isa.c).
 *
 * SwiGLU: out[i] = (g / (1 + e^-g)) * u, the scalar op's order, with e^-g from sp_exp8
 * (exp_avx2.h, within ~2 ulp of expf) instead of libm's expf one element at a time. An
 * element's bits depend only on its own inputs: the last n % 8 elements go through the
 * same vector code padded with zeros. The same at every level from AVX2 up; the portable
 * level keeps expf (docs/NUMERICS.md). */
#include "kernels/cpu/exp_avx2.h"

#include <stdint.h>

void sp_swiglu_avx2(const float *gate, const float *up, int64_t n, float *out);

static inline __attribute__((always_inline)) __m256 swiglu8(__m256 g, __m256 u)
{
    __m256 e = sp_exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void sp_swiglu_avx2(const float *gate, const float *up, int64_t n, float *out)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {0}, u[8] = {0}, o[8];
        for (int64_t k = i; k < n; k++) {
            g[k - i] = gate[k];
            u[k - i] = up[k];
        }
        _mm256_storeu_ps(o, swiglu8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        for (int64_t k = i; k < n; k++)
            out[k] = o[k - i];
    }
}
