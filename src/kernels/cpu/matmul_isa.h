/* matmul_isa.h: the contract between matmul.c (formats, threads, input preparation)
 * and the per-ISA row kernels (matmul_generic.c, matmul_avx2.c, matmul_avx512.c,
 * matmul_avx512bf16.c), each compiled with its own target flags.
 *
 * A row kernel computes y[t, r] for every token t and rows [rb, re). It may ask
 * matmul.c to prepare the input once per call (before the rows are split across
 * threads):
 *   SP_MM_PREP_NONE   x as given, [n_tok, cols] fp32
 *   SP_MM_PREP_PAIRS  fp32, each 32-column block reordered as its 16 even columns then
 *                     its 16 odd ones (matches weights decoded as even/odd halves)
 *   SP_MM_PREP_QUADS  fp32, each 8-column group reordered as its 4 even columns then its
 *                     4 odd ones (matches the AVX2 MXFP4 byte-table decode)
 *   SP_MM_PREP_Q8     8-bit: each token's row of SP_MM_Q8_BYTES(cols) bytes holds the
 *                     32-column blocks quantized (sp_mm_quantize_q8: int8 q, scale d) in
 *                     pairs (A, B) = blocks (2m, 2m+1), 128 bytes a pair: A's 16 even
 *                     columns' q, B's 16 even, A's 16 odd, B's 16 odd, then d_A four
 *                     times and d_B four times as fp32, then 12 x the sums of q over
 *                     A's columns 0-7, 8-15, 16-23, 24-31 and B's as int32 (the order of
 *                     a pair's codes as one 32-byte load of MXFP4 gives them; a missing
 *                     last B is zeros with d = 0). The fast precision of MXFP4 at AVX2.
 *   SP_MM_PREP_BF16_TILED  x rounded to bf16, tokens in tiles of SP_MM_TILE_TOKENS
 *                     (the last tile holds the rest): a tile starting at token t0 with
 *                     T tokens occupies the natural place of its tokens, and within it
 *                     each 32-column step holds the T tokens' 32 values one after
 *                     another: (t, c) at t0 * cols + (c / 32) * 32 * T + (t - t0) * 32
 *                     + c % 32. One token (T = 1) is the natural order. A prefill
 *                     tile's inputs are one sequential stream rather than T rows far
 *                     apart (which defeated the hardware prefetcher beside the weights).
 *   SP_MM_PREP_BF16_SPLIT  as SP_MM_PREP_BF16_TILED (the same tiles and steps), each
 *                     rounded value widened to fp32 (4 bytes) and each token's 32 values
 *                     of a step as its 16 even columns, then its 16 odd ones (the
 *                     vdpbf16ps-by-FMA kernels, matmul_avx512bf16_fma.c).
 * Every kernel reduces an output element in an order fixed by (ISA, precision, format,
 * cols): tiles only group work, so y[t] never depends on n_tok or the thread count. */
#ifndef SP_KERNELS_CPU_MATMUL_ISA_H
#define SP_KERNELS_CPU_MATMUL_ISA_H

#include "kernels/weight.h"
#include "specula.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sp_mm_job {
    const sp_weight *w;
    const float *x;   /* [n_tok, cols] */
    const void *xp;   /* prepared input (see above), or NULL */
    int64_t n_tok;
    float *y;         /* [n_tok, rows] */
    const float *bias;
} sp_mm_job;

typedef void (*sp_mm_rows_fn)(const sp_mm_job *j, int64_t rb, int64_t re);

typedef enum sp_mm_prep {
    SP_MM_PREP_NONE,
    SP_MM_PREP_PAIRS,
    SP_MM_PREP_QUADS,
    SP_MM_PREP_Q8,
    SP_MM_PREP_BF16_TILED,
    SP_MM_PREP_BF16_SPLIT
} sp_mm_prep;

/* Bytes of one token's SP_MM_PREP_Q8 row (cols a multiple of 32): 128 a pair of blocks. */
#define SP_MM_Q8_PAIR 128
#define SP_MM_Q8_BYTES(cols) (SP_MM_Q8_PAIR * (((cols) / 32 + 1) / 2))

enum { SP_MM_TILE_TOKENS = 6 }; /* tokens per tile of SP_MM_PREP_BF16_TILED */

typedef struct sp_mm_kernel {
    sp_mm_rows_fn fn;
    sp_mm_prep prep;
    const char *name; /* for profiles and docs */
    /* rounds n consecutive input values to bf16 (sp_mm_round_bf16), vectorized, for
     * SP_MM_PREP_BF16_TILED (for SP_MM_PREP_BF16_SPLIT, n a multiple of 32, each 32 in
     * that layout); or, for SP_MM_PREP_Q8, writes one token's row of n values
     * (sp_mm_quantize_q8's bits). NULL: matmul.c's portable loop, the same bits. */
    void (*prep_fn)(const float *x, int64_t n, void *out);
} sp_mm_kernel;

/* tile##_RxT(j, r0, t0): one tile shape of an inline tile(R, T, j, r0, t0) as its own
 * non-inlined function (the per-ISA files). Inlined into one loop nest, GCC re-loaded the
 * inputs for every row of a tile instead of keeping them in registers. */
#define SP_MM_TILE_FN(tile, R, T)                                                              \
    static __attribute__((noinline)) void tile##_##R##x##T(const sp_mm_job *j, int64_t r0,     \
                                                            int64_t t0)                        \
    {                                                                                          \
        tile(R, T, j, r0, t0);                                                                 \
    }

sp_mm_kernel sp_mm_pick_generic(const sp_weight *w);
sp_mm_kernel sp_mm_pick_avx2(const sp_weight *w);
/* Fast precision at AVX2: MXFP4 against 8-bit inputs (SP_MM_PREP_Q8); exact otherwise. */
sp_mm_kernel sp_mm_pick_avx2_fast(const sp_weight *w);
/* The AVX2 kernel for w that needs no prepared input (matmul_tiles.h's). */
sp_mm_kernel sp_mm_pick_avx2_unprepared(const sp_weight *w);
sp_mm_kernel sp_mm_pick_avx512(const sp_weight *w);
/* Fast precision: BF16 weights with bf16 inputs (vdpbf16ps), MXFP4 with 8-bit inputs
 * (sp_mm_pick_avx512vnni_q8); exact kernels for other formats. */
sp_mm_kernel sp_mm_pick_avx512bf16(const sp_weight *w);
/* The same kernels with vdpbf16ps formed by two FMAs (matmul_avx512bf16_fma.c). */
sp_mm_kernel sp_mm_pick_avx512bf16_fma(const sp_weight *w);
/* True where two FMAs a lane beat vdpbf16ps (a short timing, run once by matmul.c). */
bool sp_mm_vdpbf16ps_is_slow(void);
/* MXFP4 (cols a multiple of 32) x 8-bit inputs on vpdpbusd: the avx2 fast kernel's bits. */
sp_mm_kernel sp_mm_pick_avx512vnni_q8(void);

/* fp32 -> bf16 as vcvtneps2bf16 does: round to nearest even, NaN quieted; the input of
 * every fast-precision product (kernels and the reference). */
static inline uint16_t sp_mm_round_bf16(float f)
{
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* One 32-value block quantized as the fast precision's 8-bit inputs: d = amax / 127 (amax
 * the largest magnitude, compared as bits, so that a NaN wins), q_i = x_i * (127 / amax)
 * rounded to nearest even; q = 0 and d = 0 for a block whose amax is below 2^-120 (zero,
 * or so small that 127 / amax would overflow); a non-finite amax gives q = 0 and d = NaN
 * (the products then come out NaN). q is written in block order; the caller places it.
 * The reference of every vectorized version. */
static inline float sp_mm_quantize_q8(const float *x, int8_t *q)
{
    uint32_t amax = 0;
    for (int i = 0; i < 32; i++) {
        uint32_t u;
        __builtin_memcpy(&u, &x[i], 4);
        u &= 0x7fffffffu;
        amax = u > amax ? u : amax;
    }
    float a;
    __builtin_memcpy(&a, &amax, 4);
    if (amax >= 0x7f800000u || amax < 0x03800000u) {
        for (int i = 0; i < 32; i++)
            q[i] = 0;
        return amax < 0x03800000u ? 0.0f : __builtin_nanf("");
    }
    float id = 127.0f / a;
    for (int i = 0; i < 32; i++)
        q[i] = (int8_t)__builtin_lrintf(x[i] * id);
    return a / 127.0f;
}

#endif
