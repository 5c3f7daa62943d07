/* matmul_avx512bf16.c: row kernels of the fast precision, compiled with AVX512_BF16
 * (see CMakeLists.txt); called only when cpuid reports it (cpu_isa.c).
 *
 * The input arrives rounded to bf16 in natural order (SP_MM_PREP_BF16). Each vdpbf16ps
 * adds to fp32 lane l the products of columns 2l and 2l+1 of a 32-column block, so lane
 * l accumulates the pairs (2l, 2l+1) block after block in the instruction's fixed
 * order, and the 16 lanes are added in a fixed tree: the order depends on cols only,
 * never on the batch. BF16 weights are used as stored; MXFP4 codes become bf16 through
 * the block's scaled 16-entry table (code value times 2^e is exact in bf16) and a
 * vpermw. Other formats use the exact kernels. */
#include "kernels/cpu/matmul_isa.h"
#include "util/dtype.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

INLINE float hsum16(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 0x55));
    return _mm_cvtss_f32(b);
}

/* Tokens per cache block: bf16 inputs within ~256 KiB. */
static int64_t token_block(int64_t cols)
{
    int64_t tb = (131072 / cols) / 6 * 6;
    return tb < 6 ? 6 : tb > 96 ? 96 : tb;
}

INLINE void bf16_tile(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t t0)
{
    const int64_t n = j->w->cols;
    const uint16_t *xb = j->xp;
    const unsigned char *rows[8];
    const uint16_t *xs[6];
    __m512 acc[8][6];
    for (int r = 0; r < R; r++) {
        rows[r] = sp_weight_row(j->w, r0 + r);
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    }
    for (int t = 0; t < T; t++)
        xs[t] = xb + (t0 + t) * n;
    for (int64_t k = 0; k < n; k += 32) {
        __m512bh xv[6];
        for (int t = 0; t < T; t++)
            xv[t] = (__m512bh)_mm512_loadu_si512((const void *)(xs[t] + k));
        for (int r = 0; r < R; r++) {
            __m512bh wv = (__m512bh)_mm512_loadu_si512((const void *)(rows[r] + 2 * k));
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xv[t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            j->y[(t0 + t) * j->w->rows + r0 + r] =
                hsum16(acc[r][t]) + (j->bias ? j->bias[r0 + r] : 0.0f);
}

static const float e2m1_signed[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

INLINE void mxfp4_tile(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t t0)
{
    const sp_weight *w = j->w;
    const int64_t n = w->cols;
    const uint16_t *xb = j->xp;
    const unsigned char *rows[8], *sc[8];
    const uint16_t *xs[6];
    __m512 acc[8][6];
    const __m512 lut = _mm512_loadu_ps(e2m1_signed);
    const __m512i m15 = _mm512_set1_epi32(15);
    for (int r = 0; r < R; r++) {
        rows[r] = sp_weight_row(w, r0 + r);
        sc[r] = w->scales + (size_t)(r0 + r) * w->scale_row_bytes;
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    }
    for (int t = 0; t < T; t++)
        xs[t] = xb + (t0 + t) * n;
    for (int64_t k = 0; k < n; k += 32) {
        __m512bh xv[6];
        for (int t = 0; t < T; t++)
            xv[t] = (__m512bh)_mm512_loadu_si512((const void *)(xs[t] + k));
        for (int r = 0; r < R; r++) {
            __m512 lut_s = _mm512_mul_ps(lut, _mm512_set1_ps(sp_e8m0_to_f32(sc[r][k / 32])));
            __m512i lut_h = _mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(lut_s));
            /* dword i = byte i: low nibble -> word 2i, high nibble -> word 2i+1 */
            __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rows[r] + k / 2)));
            __m512i idx = _mm512_or_si512(_mm512_and_si512(b, m15),
                                          _mm512_slli_epi32(_mm512_srli_epi32(b, 4), 16));
            __m512bh wv = (__m512bh)_mm512_permutexvar_epi16(idx, lut_h);
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xv[t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            j->y[(t0 + t) * w->rows + r0 + r] =
                hsum16(acc[r][t]) + (j->bias ? j->bias[r0 + r] : 0.0f);
}

#define ROWS_LOOP(name, tile, RD)                                                              \
    static void name(const sp_mm_job *j, int64_t rb, int64_t re)                               \
    {                                                                                          \
        const int64_t n_tok = j->n_tok, tb_n = token_block(j->w->cols);                        \
        if (n_tok == 1) {                                                                      \
            int64_t r = rb;                                                                    \
            for (; r + RD <= re; r += RD)                                                      \
                tile(RD, 1, j, r, 0);                                                          \
            for (; r < re; r++)                                                                \
                tile(1, 1, j, r, 0);                                                           \
            return;                                                                            \
        }                                                                                      \
        for (int64_t tb = 0; tb < n_tok; tb += tb_n) {                                         \
            int64_t te = tb + tb_n < n_tok ? tb + tb_n : n_tok;                                \
            int64_t r = rb;                                                                    \
            for (; r + 4 <= re; r += 4) {                                                      \
                int64_t t = tb;                                                                \
                for (; t + 6 <= te; t += 6)                                                    \
                    tile(4, 6, j, r, t);                                                       \
                switch (te - t) {                                                              \
                case 5: tile(4, 5, j, r, t); break;                                            \
                case 4: tile(4, 4, j, r, t); break;                                            \
                case 3: tile(4, 3, j, r, t); break;                                            \
                case 2: tile(4, 2, j, r, t); break;                                            \
                case 1: tile(4, 1, j, r, t); break;                                            \
                }                                                                              \
            }                                                                                  \
            for (; r < re; r++)                                                                \
                for (int64_t t = tb; t < te; t++)                                              \
                    tile(1, 1, j, r, t);                                                       \
        }                                                                                      \
    }

ROWS_LOOP(rows_bf16_dp, bf16_tile, 8)
ROWS_LOOP(rows_mxfp4_dp, mxfp4_tile, 4)

sp_mm_kernel sp_mm_pick_avx512bf16(const sp_weight *w)
{
    if (w->cols % 32 == 0) {
        if (w->format == SP_WF_BF16)
            return (sp_mm_kernel){rows_bf16_dp, SP_MM_PREP_BF16, "avx512bf16 bf16 dot"};
        if (w->format == SP_WF_MXFP4)
            return (sp_mm_kernel){rows_mxfp4_dp, SP_MM_PREP_BF16, "avx512bf16 mxfp4 dot"};
    }
    return sp_mm_pick_avx512(w);
}
