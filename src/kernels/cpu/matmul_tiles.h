/* matmul_tiles.h: the 8-lane register-tiled row kernels for every weight format,
 * written once over simd.h's sp_v8 and compiled twice: by matmul_generic.c (portable
 * C) and by matmul_avx2.c (AVX2 + FMA + F16C). Included by exactly those files.
 *
 * Register tiling: R rows x T tokens accumulate in R*T 8-lane vectors; each weight chunk
 * is decoded once per tile and reused for T tokens. Tokens are processed in blocks that
 * fit in cache. Tiles change only how work is grouped, never the order in which one
 * output element is accumulated. */
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/simd.h"
#include "util/dtype.h"

#include <stdbool.h>
#include <string.h>

#define TOKEN_BLOCK 32

/* ---- dense formats ---------------------------------------------------------------- */

static inline __attribute__((always_inline)) sp_v8 load_w8(const sp_wformat f,
                                                           const unsigned char *row, int64_t k)
{
    if (f == SP_WF_F32)
        return sp_v8_load((const float *)(const void *)(row + 4 * k));
    if (f == SP_WF_BF16)
        return sp_v8_load_bf16(row + 2 * k);
    return sp_v8_load_f16(row + 2 * k);
}

static inline __attribute__((always_inline)) float load_w1(const sp_wformat f,
                                                           const unsigned char *row, int64_t k)
{
    uint16_t h;
    float v;
    if (f == SP_WF_F32) {
        memcpy(&v, row + 4 * k, 4);
        return v;
    }
    memcpy(&h, row + 2 * k, 2);
    return f == SP_WF_BF16 ? sp_bf16_to_f32(h) : sp_f16_to_f32(h);
}

/* ---- block-quantized formats ---------------------------------------------------------
 * Each row is decoded one scale block at a time into a small buffer, scale applied per
 * element, then reduced with the same 8-lane contract as the dense path. */

static inline float quant_scale(const sp_weight *w, int64_t r, int64_t c)
{
    switch (w->format) {
    case SP_WF_MXFP4:
        return sp_e8m0_to_f32(w->scales[(size_t)r * w->scale_row_bytes + (size_t)(c / 32)]);
    case SP_WF_NVFP4:
        return sp_e4m3_to_f32(w->scales[(size_t)r * w->scale_row_bytes + (size_t)(c / 16)]) *
               w->global_scale;
    case SP_WF_FP8_BLOCK: {
        float s;
        memcpy(&s, w->scales + (size_t)((r + w->row_offset) / 128) * w->scale_row_bytes +
                       4 * (size_t)(c / 128), 4);
        return s;
    }
    default: return 1.0f;
    }
}

/* Decodes 8 elements [k, k+8) of row r (k a multiple of 8; scale blocks are multiples
 * of 8) exactly as sp_weight_at does: code value times the block's scale. */
static inline sp_v8 quant_decode8(const sp_weight *w, int64_t r, int64_t k)
{
    const unsigned char *row = sp_weight_row(w, r);
    float s = quant_scale(w, r, k);
    if (w->format == SP_WF_FP8_BLOCK) {
        float out[8];
        for (int i = 0; i < 8; i++)
            out[i] = sp_e4m3_to_f32(row[k + i]) * s;
        return sp_v8_load(out);
    }
#if SP_SIMD_AVX2
    /* 4 bytes = 8 codes; element i is bits [4i, 4i+4) of the little-endian word, so the
     * low nibble of byte j is element 2j. Magnitude from a register LUT, sign from bit 3. */
    uint32_t word;
    memcpy(&word, row + k / 2, 4);
    __m256i code = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32((int)word), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
        _mm256_set1_epi32(15));
    __m256 mag = _mm256_permutevar8x32_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f),
                                          code);
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(code, _mm256_set1_epi32(8)), 28);
    return _mm256_mul_ps(_mm256_xor_ps(mag, _mm256_castsi256_ps(sign)), _mm256_set1_ps(s));
#else
    float out[8];
    for (int i = 0; i < 4; i++) {
        unsigned b = row[k / 2 + i];
        out[2 * i] = sp_e2m1_table[b & 15] * s;
        out[2 * i + 1] = sp_e2m1_table[b >> 4] * s;
    }
    return sp_v8_load(out);
#endif
}

#if SP_SIMD_AVX2
/* FP4 (MXFP4 / NVFP4) tile: per scale block the 8 code magnitudes are multiplied by the
 * block's scale once (lut[c] * s: the same product the reference decoder forms), then
 * each 8-code chunk is a register permute plus a sign flip. Rows are whole scale blocks
 * (binding checks it), so no tail. */
static inline __attribute__((always_inline)) void
fp4_tile(const int R, const int T, const int BS, const sp_weight *w, const float *x, int64_t r0,
         int64_t t0, float *y, const float *bias)
{
    const int64_t n = w->cols;
    const __m256 lut = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i m15 = _mm256_set1_epi32(15), m8 = _mm256_set1_epi32(8);
    const unsigned char *rows[4], *sc[4];
    const float *xs[4];
    sp_v8 acc[4][4];
    for (int r = 0; r < R; r++) {
        rows[r] = sp_weight_row(w, r0 + r);
        sc[r] = w->scales + (size_t)(r0 + r) * w->scale_row_bytes;
        for (int t = 0; t < T; t++)
            acc[r][t] = sp_v8_zero();
    }
    for (int t = 0; t < T; t++)
        xs[t] = x + (t0 + t) * n;
    for (int64_t kb = 0; kb < n; kb += BS) {
        __m256 lutS[4];
        for (int r = 0; r < R; r++) {
            float s = BS == 32 ? sp_e8m0_to_f32(sc[r][kb / 32])
                               : sp_e4m3_to_f32(sc[r][kb / 16]) * w->global_scale;
            lutS[r] = _mm256_mul_ps(lut, _mm256_set1_ps(s));
        }
        for (int64_t k = kb; k < kb + BS; k += 8) {
            __m256 xv[4];
            for (int t = 0; t < T; t++)
                xv[t] = _mm256_loadu_ps(xs[t] + k);
            for (int r = 0; r < R; r++) {
                uint32_t word;
                memcpy(&word, rows[r] + k / 2, 4);
                __m256i code = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)word), shifts), m15);
                __m256i sign = _mm256_slli_epi32(_mm256_and_si256(code, m8), 28);
                __m256 wv = _mm256_xor_ps(_mm256_permutevar8x32_ps(lutS[r], code), _mm256_castsi256_ps(sign));
                for (int t = 0; t < T; t++)
                    acc[r][t] = _mm256_fmadd_ps(xv[t], wv, acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            y[(t0 + t) * w->rows + r0 + r] = sp_v8_hsum(acc[r][t]) + (bias ? bias[r0 + r] : 0.0f);
}

#endif

/* ---- one tile, one row loop for every format ---------------------------------------
 * FMT_QUANT stands for the block formats decoded one 8-element chunk at a time (the
 * format is read from the weight); fast_fp4 picks the register-LUT FP4 tile. */

#define FMT_QUANT SP_WF_NONE

static inline __attribute__((always_inline)) sp_v8 chunk8(const sp_wformat f, const sp_weight *w,
                                                         const unsigned char *row, int64_t r, int64_t k)
{
    return f == FMT_QUANT ? quant_decode8(w, r, k) : load_w8(f, row, k);
}

static inline __attribute__((always_inline)) float elem1(const sp_wformat f, const sp_weight *w,
                                                        const unsigned char *row, int64_t r, int64_t k)
{
    return f == FMT_QUANT ? sp_weight_at(w, r, k) : load_w1(f, row, k);
}

/* The R x T tile at rows r0.., tokens t0..: each weight chunk is loaded (decoded) once
 * and used for T tokens; R independent rows keep the FMA pipeline busy. */
static inline __attribute__((always_inline)) void
tile(const sp_wformat f, const int R, const int T, const sp_weight *w, const float *x, int64_t r0,
     int64_t t0, float *y, const float *bias)
{
    const int64_t n = w->cols, n8 = n & ~(int64_t)7;
    const unsigned char *rows[4];
    const float *xs[4];
    sp_v8 acc[4][4];
    for (int r = 0; r < R; r++) {
        rows[r] = sp_weight_row(w, r0 + r);
        for (int t = 0; t < T; t++)
            acc[r][t] = sp_v8_zero();
    }
    for (int t = 0; t < T; t++)
        xs[t] = x + (t0 + t) * n;
    for (int64_t k = 0; k < n8; k += 8) {
        sp_v8 xv[4];
        for (int t = 0; t < T; t++)
            xv[t] = sp_v8_load(xs[t] + k);
        for (int r = 0; r < R; r++) {
            sp_v8 wv = chunk8(f, w, rows[r], r0 + r, k);
            for (int t = 0; t < T; t++)
                acc[r][t] = sp_v8_fmadd(xv[t], wv, acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float s = sp_v8_hsum(acc[r][t]);
            for (int64_t k = n8; k < n; k++)
                s += xs[t][k] * elem1(f, w, rows[r], r0 + r, k);
            if (bias)
                s += bias[r0 + r];
            y[(t0 + t) * w->rows + r0 + r] = s;
        }
}

static inline __attribute__((always_inline)) void
any_tile(const sp_wformat f, const bool fast_fp4, const int R, const int T, const sp_weight *w,
         const float *x, int64_t r0, int64_t t0, float *y, const float *bias)
{
#if SP_SIMD_AVX2
    if (fast_fp4) {
        fp4_tile(R, T, f == SP_WF_MXFP4 ? 32 : 16, w, x, r0, t0, y, bias);
        return;
    }
#endif
    tile(f, R, T, w, x, r0, t0, y, bias);
}

/* Rows [rb, re) for every token: tiles of 4 rows x 2 tokens, then the edges. */
static inline __attribute__((always_inline)) void
rows_loop(const sp_wformat f, const bool fast_fp4, const sp_weight *w, const float *x, int64_t n_tok,
          float *y, const float *bias, int64_t rb, int64_t re)
{
    for (int64_t tb = 0; tb < n_tok; tb += TOKEN_BLOCK) {
        int64_t te = tb + TOKEN_BLOCK < n_tok ? tb + TOKEN_BLOCK : n_tok;
        int64_t r = rb;
        for (; r + 4 <= re; r += 4) {
            int64_t t = tb;
            for (; t + 2 <= te; t += 2)
                any_tile(f, fast_fp4, 4, 2, w, x, r, t, y, bias);
            if (t < te)
                any_tile(f, fast_fp4, 4, 1, w, x, r, t, y, bias);
        }
        for (; r < re; r++) {
            int64_t t = tb;
            for (; t + 2 <= te; t += 2)
                any_tile(f, fast_fp4, 1, 2, w, x, r, t, y, bias);
            if (t < te)
                any_tile(f, fast_fp4, 1, 1, w, x, r, t, y, bias);
        }
    }
}

#define ROWS_FN(name, fmt, fast)                                                               \
    static void name(const sp_mm_job *j, int64_t rb, int64_t re)                               \
    {                                                                                          \
        rows_loop(fmt, fast, j->w, j->x, j->n_tok, j->y, j->bias, rb, re);                      \
    }
ROWS_FN(rows_f32, SP_WF_F32, false)
ROWS_FN(rows_bf16, SP_WF_BF16, false)
ROWS_FN(rows_f16, SP_WF_F16, false)
ROWS_FN(rows_quant, FMT_QUANT, false)
#if SP_SIMD_AVX2
ROWS_FN(rows_mxfp4, SP_WF_MXFP4, true)
ROWS_FN(rows_nvfp4, SP_WF_NVFP4, true)
#endif


static sp_mm_kernel pick_tiles(const sp_weight *w, const char *isa)
{
    sp_mm_kernel k = {rows_quant, SP_MM_PREP_NONE, isa, NULL};
    switch (w->format) {
    case SP_WF_F32: k.fn = rows_f32; break;
    case SP_WF_BF16: k.fn = rows_bf16; break;
    case SP_WF_F16: k.fn = rows_f16; break;
#if SP_SIMD_AVX2
    case SP_WF_MXFP4: k.fn = w->cols % 32 ? rows_quant : rows_mxfp4; break;
    case SP_WF_NVFP4: k.fn = w->cols % 16 ? rows_quant : rows_nvfp4; break;
#endif
    default: break;
    }
    return k;
}
