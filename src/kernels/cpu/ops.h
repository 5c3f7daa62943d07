/* ops.h: the element-wise and per-row CPU ops of the forward pass.
 * All are deterministic per row (fixed reduction order, see simd.h) and independent of
 * how many rows are processed together. Shapes are given as [rows, dim]. */
#ifndef SP_KERNELS_CPU_OPS_H
#define SP_KERNELS_CPU_OPS_H

#include <stdint.h>

/* out = w * (x / sqrt(mean(x^2) + eps)), per row; w may be NULL (no scale). x == out ok. */
void sp_rmsnorm(const float *x, const float *w, int64_t rows, int64_t dim, float eps,
                float *out);
/* Scalar reference (double accumulation). */
void sp_rmsnorm_ref(const float *x, const float *w, int64_t rows, int64_t dim, float eps,
                    float *out);

/* y += x, n elements. */
void sp_add_inplace(float *y, const float *x, int64_t n);

/* out[i] = silu(gate[i]) * up[i]: e^-g by expf at the portable level, by an 8-lane
 * polynomial within ~2 ulp of it from AVX2 up (ops_avx2.c); an element's bits depend on
 * its inputs and the level only. */
void sp_swiglu(const float *gate, const float *up, int64_t n, float *out);

/* Rotary embedding on one head vector x[dim_rot...] in place, NeoX halves:
 * x[i], x[i+d/2] rotated by angle pos*inv_freq[i]; cos/sin scaled by attn_factor.
 * cos_sin holds precomputed [d/2] cos then [d/2] sin for this position. */
void sp_rope_neox(float *x, int64_t d, const float *cos_sin);
/* GPT-J style: adjacent pairs (x[2i], x[2i+1]) rotated, output de-interleaved into
 * halves as transformers' rope_interleave does. */
void sp_rope_interleaved(float *x, int64_t d, const float *cos_sin);

float sp_silu(float x);

#endif
