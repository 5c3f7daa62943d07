/* matmul_avx512.c: 16-lane row kernels for the exact precision, compiled with AVX-512
 * F/BW/VL/DQ (see CMakeLists.txt); called only when cpuid reports them (cpu_isa.c).
 *
 * BF16 and MXFP4 weights are decoded as even/odd halves of each 32-column block
 * without any shuffle: a BF16 dword holds column 2i in its low half and 2i+1 in its high
 * half (low half << 16 and high half & 0xffff0000 are the two fp32 values); an MXFP4
 * byte holds column 2i in its low nibble and 2i+1 in its high nibble (two vpermps from
 * the block's 16-entry scaled code table). The input is prepared once per call in the
 * matching order (SP_MM_PREP_PAIRS), so lane l of an accumulator sums, block after
 * block, x[2l] w[2l] then x[2l+1] w[2l+1] with fused multiply-adds; the 16 lanes are
 * then added in a fixed tree. The tile shape (R rows x T tokens) only groups this work.
 * Other formats (and column counts not a multiple of 32) use the AVX2 kernels. */
#include "kernels/cpu/matmul_isa.h"
#include "util/dtype.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* Fixed tree: 16 -> 8 -> 4 -> 2 -> 1, each step adding the upper half to the lower. */
INLINE float hsum16(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 0x55));
    return _mm_cvtss_f32(b);
}

/* Tokens per cache block: the block's inputs (fp32) stay within ~256 KiB of L2 while
 * each group of rows is streamed once per block. */
static int64_t token_block(int64_t cols)
{
    int64_t tb = (65536 / cols) & ~(int64_t)3;
    return tb < 4 ? 4 : tb > 64 ? 64 : tb;
}

/* ---- BF16 ---------------------------------------------------------------------------- */

INLINE void bf16_tile(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t t0)
{
    const int64_t n = j->w->cols;
    const float *xp = j->xp;
    const unsigned char *rows[8];
    const float *xs[4];
    __m512 acc[8][4];
    const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);
    for (int r = 0; r < R; r++) {
        rows[r] = sp_weight_row(j->w, r0 + r);
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    }
    for (int t = 0; t < T; t++)
        xs[t] = xp + (t0 + t) * n;
    for (int64_t k = 0; k < n; k += 32) {
        __m512 xe[4], xo[4];
        for (int t = 0; t < T; t++) {
            xe[t] = _mm512_loadu_ps(xs[t] + k);
            xo[t] = _mm512_loadu_ps(xs[t] + k + 16);
        }
        for (int r = 0; r < R; r++) {
            if (T == 1) /* as the AVX2 tiles (matmul_avx2_tiles.h): 8192 x 2880, 2
                         * threads, 23 -> 27-28 GB/s on an Emerald Rapids core */
                _mm_prefetch((const char *)(rows[r] + 2 * k + 1024), _MM_HINT_T0);
            __m512i d = _mm512_loadu_si512((const void *)(rows[r] + 2 * k));
            __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(d, 16));
            __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(d, hi_mask));
            for (int t = 0; t < T; t++) {
                acc[r][t] = _mm512_fmadd_ps(we, xe[t], acc[r][t]);
                acc[r][t] = _mm512_fmadd_ps(wo, xo[t], acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            j->y[(t0 + t) * j->w->rows + r0 + r] =
                hsum16(acc[r][t]) + (j->bias ? j->bias[r0 + r] : 0.0f);
}

/* ---- MXFP4 --------------------------------------------------------------------------- */

static const float e2m1_signed[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

INLINE void mxfp4_tile(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t t0)
{
    const sp_weight *w = j->w;
    const int64_t n = w->cols;
    const float *xp = j->xp;
    const unsigned char *rows[8], *sc[8];
    const float *xs[4];
    __m512 acc[8][4];
    const __m512 lut = _mm512_loadu_ps(e2m1_signed);
    const __m512i m15 = _mm512_set1_epi32(15);
    for (int r = 0; r < R; r++) {
        rows[r] = sp_weight_row(w, r0 + r);
        sc[r] = w->scales + (size_t)(r0 + r) * w->scale_row_bytes;
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    }
    for (int t = 0; t < T; t++)
        xs[t] = xp + (t0 + t) * n;
    for (int64_t k = 0; k < n; k += 32) {
        __m512 xe[4], xo[4];
        for (int t = 0; t < T; t++) {
            xe[t] = _mm512_loadu_ps(xs[t] + k);
            xo[t] = _mm512_loadu_ps(xs[t] + k + 16);
        }
        for (int r = 0; r < R; r++) {
            /* code value times the block scale: the reference decoder's product */
            __m512 lut_s = _mm512_mul_ps(lut, _mm512_set1_ps(sp_e8m0_to_f32(sc[r][k / 32])));
            __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rows[r] + k / 2)));
            __m512 we = _mm512_permutexvar_ps(_mm512_and_si512(b, m15), lut_s);
            __m512 wo = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut_s);
            for (int t = 0; t < T; t++) {
                acc[r][t] = _mm512_fmadd_ps(we, xe[t], acc[r][t]);
                acc[r][t] = _mm512_fmadd_ps(wo, xo[t], acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            j->y[(t0 + t) * w->rows + r0 + r] =
                hsum16(acc[r][t]) + (j->bias ? j->bias[r0 + r] : 0.0f);
}

/* ---- the loop over rows and tokens ---------------------------------------------------
 * Token blocks outermost (their inputs stay in cache), then groups of R rows, then tiles
 * of 4 tokens (decode: one token, RD rows at a time for more independent streams). */

#define ROWS_LOOP(name, tile, RD)                                                              \
    static void name(const sp_mm_job *j, int64_t rb, int64_t re)                               \
    {                                                                                          \
        const int64_t n_tok = j->n_tok, tb_n = token_block(j->w->cols);                        \
        if (n_tok == 1) {                                                                      \
            int64_t r = rb;                                                                    \
            for (; r + RD <= re; r += RD)                                                      \
                tile##_##RD##x1(j, r, 0);                                                      \
            for (; r < re; r++)                                                                \
                tile##_1x1(j, r, 0);                                                           \
            return;                                                                            \
        }                                                                                      \
        for (int64_t tb = 0; tb < n_tok; tb += tb_n) {                                         \
            int64_t te = tb + tb_n < n_tok ? tb + tb_n : n_tok;                                \
            int64_t r = rb;                                                                    \
            for (; r + 4 <= re; r += 4) {                                                      \
                int64_t t = tb;                                                                \
                for (; t + 4 <= te; t += 4)                                                    \
                    tile##_4x4(j, r, t);                                                       \
                switch (te - t) {                                                              \
                case 3: tile##_4x3(j, r, t); break;                                            \
                case 2: tile##_4x2(j, r, t); break;                                            \
                case 1: tile##_4x1(j, r, t); break;                                            \
                }                                                                              \
            }                                                                                  \
            for (; r < re; r++) {                                                              \
                int64_t t = tb;                                                                \
                for (; t + 4 <= te; t += 4)                                                    \
                    tile##_1x4(j, r, t);                                                       \
                for (; t < te; t++)                                                            \
                    tile##_1x1(j, r, t);                                                       \
            }                                                                                  \
        }                                                                                      \
    }

#define TILE_FN SP_MM_TILE_FN
#define TILE_FNS(tile)                                                                         \
    TILE_FN(tile, 4, 4)                                                                        \
    TILE_FN(tile, 4, 3)                                                                        \
    TILE_FN(tile, 4, 2)                                                                        \
    TILE_FN(tile, 4, 1)                                                                        \
    TILE_FN(tile, 1, 4)                                                                        \
    TILE_FN(tile, 1, 1)
TILE_FNS(bf16_tile)
TILE_FN(bf16_tile, 8, 1)
TILE_FNS(mxfp4_tile)

ROWS_LOOP(rows_bf16_pairs, bf16_tile, 8)
ROWS_LOOP(rows_mxfp4_pairs, mxfp4_tile, 4)

sp_mm_kernel sp_mm_pick_avx512(const sp_weight *w)
{
    if (w->cols % 32 == 0) {
        if (w->format == SP_WF_BF16)
            return (sp_mm_kernel){rows_bf16_pairs, SP_MM_PREP_PAIRS, "avx512 bf16 pairs", NULL};
        if (w->format == SP_WF_MXFP4)
            return (sp_mm_kernel){rows_mxfp4_pairs, SP_MM_PREP_PAIRS, "avx512 mxfp4 pairs", NULL};
    }
    return sp_mm_pick_avx2(w);
}
