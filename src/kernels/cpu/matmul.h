/* matmul.h: y = x W^T (+ bias) for every weight format, on the CPU.
 *
 * x is [n_tok, W.cols] and y is [n_tok, W.rows], both contiguous fp32. Work is split
 * across threads by output rows only; each output element is one fixed-order reduction
 * (the order depends on the ISA level, the precision, the format and W.cols only), so
 * y[t] is bit-identical whatever n_tok is and whatever else is in the batch.
 *
 * Two precisions (sp_precision in specula.h): EXACT multiplies fp32 activations by the
 * exactly decoded weights with fp32 fused multiply-adds; FAST first rounds the
 * activations to bf16 and, on CPUs with AVX512_BF16, uses vdpbf16ps (two bf16 products
 * per fp32 lane), except for MXFP4 weights, whose inputs it quantizes to 8 bits per
 * 32-column block at the avx2 and avx512bf16 levels (integer sums); elsewhere FAST
 * computes as EXACT. sp_matmul takes the precision set on
 * the pool (sp_pool_set_precision; EXACT for a NULL pool). sp_matmul_ref and
 * sp_matmul_ref_prec are the scalar references (double accumulation) the kernels are
 * tested against. The kernels are chosen at run time by cpuid (cpu_isa.h). */
#ifndef SP_KERNELS_CPU_MATMUL_H
#define SP_KERNELS_CPU_MATMUL_H

#include "kernels/weight.h"
#include "util/threadpool.h"

#include <stdbool.h>

void sp_matmul(sp_pool *pool, const sp_weight *w, const float *x, int64_t n_tok, float *y,
               const float *bias);

/* As sp_matmul with an explicit precision. */
void sp_matmul_prec(sp_pool *pool, sp_precision prec, const sp_weight *w, const float *x,
                    int64_t n_tok, float *y, const float *bias);

/* Products that share their input x, in the pool's precision: ys[i] = x ws[i]^T +
 * biases[i] (biases may be NULL). The input is prepared once and all rows are one
 * parallel-for (one join instead of n); every output has the bits sp_matmul gives it. */
void sp_matmul_multi(sp_pool *pool, int n, const sp_weight *const *ws, const float *x,
                     int64_t n_tok, float *const *ys, const float *const *biases);

/* Products with their own inputs, in the pool's precision: ys[i] = xs[i] ws[i]^T +
 * biases[i] (biases may be NULL) for n_toks[i] tokens. Every input is prepared once and
 * all rows are one parallel-for (a mixture-of-experts layer's experts in one join); every
 * output has the bits sp_matmul gives it. */
void sp_matmul_each(sp_pool *pool, int n, const sp_weight *const *ws, const float *const *xs,
                    const int64_t *n_toks, float *const *ys, const float *const *biases);

/* out = silu(x wg^T) * (x wu^T), up = x wu^T, in one parallel-for: each chunk of rows
 * computes both products and then the activation on its rows. Bit-identical to
 * sp_matmul twice and sp_swiglu. */
void sp_matmul_swiglu(sp_pool *pool, const sp_weight *wg, const sp_weight *wu, const float *x,
                      int64_t n_tok, float *out, float *up);

/* Scalar reference. */
void sp_matmul_ref(const sp_weight *w, const float *x, int64_t n_tok, float *y,
                   const float *bias);

/* Reference for a precision: FAST rounds x to bf16 as the kernels do. */
void sp_matmul_ref_prec(sp_precision prec, const sp_weight *w, const float *x, int64_t n_tok,
                        float *y, const float *bias);
/* Reference of the 8-bit-input products (the fast precision of MXFP4 at AVX2): each
 * 32-column block of x quantized by sp_mm_quantize_q8, then sum of d * q . w. */
void sp_matmul_ref_q8(const sp_weight *w, const float *x, int64_t n_tok, float *y,
                      const float *bias);
/* One token's SP_MM_PREP_Q8 row (matmul_isa.h) of cols values, portable. */
void sp_mm_prep_q8_row(const float *x, int64_t cols, unsigned char *row);
/* The same row as the fast MXFP4 kernel of the active level writes it (vectorized where
 * it has a vector version); false when that kernel takes no 8-bit inputs. For tests: it
 * must equal sp_mm_prep_q8_row bit for bit. */
bool sp_matmul_prep_q8(const float *x, int64_t cols, unsigned char *out);
/* The fast precision's input rounding as the kernel sp_matmul_prec would use for w in a
 * prefill now does it (vectorized where its level has a vector version; split inputs
 * joined again): n values to bf16 bits. For
 * tests: it must equal sp_mm_round_bf16 (matmul_isa.h) bit for bit. */
void sp_matmul_round_input(const sp_weight *w, const float *x, int64_t n, uint16_t *out);
/* How the avx512bf16 level's BF16 kernels form vdpbf16ps's products: the instruction, or
 * two fp32 FMAs a lane with MXCSR's DAZ and FTZ (the same bits, NaN payloads aside, so
 * the choice may differ from call to call): always, or for calls of 4 tokens or more
 * (verify passes and prefill; one to three tokens wait on the weights' stream, and the
 * FMAs' wider inputs slow that down). AUTO,
 * the default, reads SPECULA_BF16_DOT=vdpbf16ps|fma|batches, else times both once on this
 * core and takes FMA_BATCHES where FMAs are at least 4/3 as fast (Intel's Sapphire and
 * Emerald Rapids retire one vdpbf16ps every two cycles, two FMAs a cycle). */
typedef enum sp_bf16_dot {
    SP_BF16_DOT_AUTO,
    SP_BF16_DOT_VDPBF16PS,
    SP_BF16_DOT_FMA,
    SP_BF16_DOT_FMA_BATCHES
} sp_bf16_dot;
/* The way in use (AUTO resolved). */
sp_bf16_dot sp_matmul_bf16_dot(void);
/* Sets it (AUTO: decide again); not thread-safe against running kernels (tests). */
void sp_matmul_set_bf16_dot(sp_bf16_dot d);
/* Name of the row kernel sp_matmul_prec would use for w now for one token (profiles,
 * docs), and for a call of n_tok tokens (which may differ: sp_bf16_dot). */
const char *sp_matmul_kernel_name(const sp_weight *w, sp_precision prec);
const char *sp_matmul_kernel_name_n(const sp_weight *w, sp_precision prec, int64_t n_tok);

/* Transposed product with a row range of W: y[t, c] = bias[c] + sum over i < n_in of
 * x[t * x_stride + i] * W[row0 + i, c], for c < W.cols. Serves weights stored input-major
 * (gpt-oss's unquantized experts, [H, 2I] used as x @ W) and MLA's absorbed key
 * projection. Each output sums over i in ascending order: batch- and thread-invariant. */
void sp_matmul_t(sp_pool *pool, const sp_weight *w, int64_t row0, int64_t n_in, const float *x,
                 int64_t x_stride, int64_t n_tok, float *y, int64_t y_stride, const float *bias);
void sp_matmul_t_ref(const sp_weight *w, int64_t row0, int64_t n_in, const float *x,
                     int64_t x_stride, int64_t n_tok, float *y, int64_t y_stride, const float *bias);

/* Decodes element (r, c) exactly (reference decoder for every format). */
float sp_weight_at(const sp_weight *w, int64_t r, int64_t c);
/* Decodes row r into out[cols] with the reference decoder. */
void sp_weight_row_f32(const sp_weight *w, int64_t r, float *out);

#endif
