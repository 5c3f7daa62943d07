/* ops.c: per-row CPU ops (see ops.h); SwiGLU on 8 lanes from AVX2 up (ops_avx2.c). */
#include "kernels/cpu/ops.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/simd.h"

#include <math.h>

void sp_rmsnorm(const float *x, const float *w, int64_t rows, int64_t dim, float eps,
                float *out)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *o = out + r * dim;
        float ms = sp_sumsq_f32(xr, dim) / (float)dim;
        float inv = 1.0f / sqrtf(ms + eps);
        if (w)
            for (int64_t i = 0; i < dim; i++)
                o[i] = w[i] * (xr[i] * inv);
        else
            for (int64_t i = 0; i < dim; i++)
                o[i] = xr[i] * inv;
    }
}

void sp_rmsnorm_ref(const float *x, const float *w, int64_t rows, int64_t dim, float eps,
                    float *out)
{
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t i = 0; i < dim; i++)
            s += (double)x[r * dim + i] * x[r * dim + i];
        double inv = 1.0 / sqrt(s / (double)dim + eps);
        for (int64_t i = 0; i < dim; i++)
            out[r * dim + i] = (float)((w ? w[i] : 1.0) * (x[r * dim + i] * inv));
    }
}

void sp_add_inplace(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

float sp_silu(float x)
{
    return x / (1.0f + expf(-x));
}

#ifdef SP_HAVE_AVX2_KERNELS
void sp_swiglu_avx2(const float *gate, const float *up, int64_t n, float *out);
#endif

void sp_swiglu(const float *gate, const float *up, int64_t n, float *out)
{
#ifdef SP_HAVE_AVX2_KERNELS
    if (sp_isa_active() >= SP_ISA_AVX2) {
        sp_swiglu_avx2(gate, up, n, out);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        out[i] = sp_silu(gate[i]) * up[i];
}

void sp_rope_neox(float *x, int64_t d, const float *cos_sin)
{
    int64_t h = d / 2;
    const float *c = cos_sin, *s = cos_sin + h;
    for (int64_t i = 0; i < h; i++) {
        float a = x[i], b = x[i + h];
        x[i] = a * c[i] - b * s[i];
        x[i + h] = b * c[i] + a * s[i];
    }
}

void sp_rope_interleaved(float *x, int64_t d, const float *cos_sin)
{
    int64_t h = d / 2;
    float tmp[2048];
    for (int64_t i = 0; i < h && i < 1024; i++) {
        tmp[i] = x[2 * i];
        tmp[i + h] = x[2 * i + 1];
    }
    for (int64_t i = 0; i < d && i < 2048; i++)
        x[i] = tmp[i];
    sp_rope_neox(x, d, cos_sin);
}
