/* matmul_q8.h: MXFP4 weights times 8-bit inputs (the fast precision's MXFP4 products at
 * the avx2 and avx512bf16 levels), written once and compiled by matmul_avx2.c (vpmaddubsw)
 * and matmul_avx512vnni.c (vpdpbusd). Both form the same exact integer sums, so both give
 * the same bits. Needs matmul_avx2_tiles.h first. */
#ifndef SP_KERNELS_CPU_MATMUL_Q8_H
#define SP_KERNELS_CPU_MATMUL_Q8_H

#include "kernels/cpu/matmul.h"

#include <stdbool.h>
#include <string.h>


/* ---- MXFP4 x 8-bit inputs (the fast precision) ------------------------------------- *
 * The inputs are quantized per 32-column block (sp_mm_quantize_q8: int8 q, scale d) into
 * SP_MM_PREP_Q8 rows, blocks in pairs (A, B). One 32-byte load of a row holds a pair's
 * codes: A's 16 bytes in the low 128-bit lane, B's in the high one; the low nibbles
 * (even columns) and the high nibbles (odd columns) become bytes u = 2 x E2M1 + 12 (0..24)
 * through one vpshufb each, in the order of the prepared q (A evens, B evens; A odds, B
 * odds). sum q_i v_i is exact in integers: vpmaddubsw on u (unsigned) and q, the even and
 * odd halves added (16 bits hold it: |sum| <= 4 x 24 x 127), vpmaddwd, minus the input's
 * prepared 12 x sum q_i, so that lane l of the pair's partial is the integer dot product
 * of 8 consecutive columns: A's columns 8l..8l+7 for l < 4, B's 8(l-4).. for l >= 4 (the
 * same integers as |v| times q signed like v, two instructions fewer a token). Lane l of
 * an accumulator takes, pair after pair, that partial times its block's (scale / 2) x d
 * by one FMA (a last block without a partner pairs with zeros: its B lanes add 0 x 0);
 * the 8 lanes are added in sp_v8_hsum's tree. */

/* One block's 32 q as a vector, the 16 even columns' then the 16 odd ones', and its d
 * (sp_mm_quantize_q8's bits, vectorized; zero, tiny and non-finite blocks go to it). */
INLINE float q8_block(const float *xb, __m256i *out, __m128i *sums)
{
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i bytes = _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15, 0, 1, 4,
                                           5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
    __m256 v[4];
    __m256i m = _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(xb + 8 * i);
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(v[i]), abs_mask));
    }
    m = _mm256_max_epu32(m, _mm256_permute2x128_si256(m, m, 1));
    m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    uint32_t amax = (uint32_t)_mm256_cvtsi256_si32(m);
    if (amax >= 0x7f800000u || amax < 0x03800000u) { /* zero, tiny or not finite: q = 0 */
        int8_t q[32];
        *out = _mm256_setzero_si256();
        *sums = _mm_setzero_si128();
        return sp_mm_quantize_q8(xb, q);
    }
    float a;
    memcpy(&a, &amax, 4);
    __m256 id = _mm256_set1_ps(127.0f / a);
    __m256i qi[4];
    for (int i = 0; i < 4; i++)
        qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    /* evens and odds of columns 0-15 and 16-31, then to bytes in their order */
    __m256 e01 = _mm256_shuffle_ps(_mm256_castsi256_ps(qi[0]), _mm256_castsi256_ps(qi[1]), 0x88);
    __m256 o01 = _mm256_shuffle_ps(_mm256_castsi256_ps(qi[0]), _mm256_castsi256_ps(qi[1]), 0xdd);
    __m256 e23 = _mm256_shuffle_ps(_mm256_castsi256_ps(qi[2]), _mm256_castsi256_ps(qi[3]), 0x88);
    __m256 o23 = _mm256_shuffle_ps(_mm256_castsi256_ps(qi[2]), _mm256_castsi256_ps(qi[3]), 0xdd);
    __m256i e = _mm256_packs_epi32(_mm256_castps_si256(e01), _mm256_castps_si256(e23));
    __m256i o = _mm256_packs_epi32(_mm256_castps_si256(o01), _mm256_castps_si256(o23));
    *out = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(_mm256_packs_epi16(e, o), order), bytes);
    /* 12 x the sums of columns 0-7, 8-15, 16-23, 24-31 */
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(qi[0], qi[1]), _mm256_hadd_epi32(qi[2], qi[3]));
    __m128i c = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    *sums = _mm_add_epi32(_mm_slli_epi32(c, 3), _mm_slli_epi32(c, 2));
    return a / 127.0f;
}

/* One token's row of 8-bit inputs: sp_mm_prep_q8_row's bits, vectorized. */
static void prep_q8(const float *x, int64_t cols, void *out)
{
    const int64_t nb = cols / 32;
    for (int64_t b = 0; b < nb; b += 2) {
        unsigned char *pair = (unsigned char *)out + SP_MM_Q8_PAIR * (b / 2);
        __m256i qa, qb = _mm256_setzero_si256();
        __m128i ca, cb = _mm_setzero_si128();
        float da = q8_block(x + 32 * b, &qa, &ca);
        float db = b + 1 < nb ? q8_block(x + 32 * b + 32, &qb, &cb) : 0.0f;
        _mm256_storeu_si256((__m256i *)(void *)pair, _mm256_permute2x128_si256(qa, qb, 0x20));
        _mm256_storeu_si256((__m256i *)(void *)(pair + 32), _mm256_permute2x128_si256(qa, qb, 0x31));
        _mm256_storeu_ps((float *)(void *)(pair + 64),
                         _mm256_setr_m128(_mm_set1_ps(da), _mm_set1_ps(db)));
        _mm256_storeu_si256((__m256i *)(void *)(pair + 96), _mm256_setr_m128i(ca, cb));
    }
}

/* (scale / 2) of each E8M0 byte b, as bits: 2^(b-128), the reference decoder's e8m0 x 0.5
 * exactly (b = 0 and 1 are the subnormals 2^-128 and 2^-127; b = 255 NaN). */
#define E8H(b) ((b) == 0 ? 0x00200000u : (b) == 1 ? 0x00400000u : (b) == 255 ? 0x7fc00000u : ((uint32_t)(b)-1) << 23)
#define E8H4(b) E8H(b), E8H((b) + 1), E8H((b) + 2), E8H((b) + 3)
#define E8H16(b) E8H4(b), E8H4((b) + 4), E8H4((b) + 8), E8H4((b) + 12)
#define E8H64(b) E8H16(b), E8H16((b) + 16), E8H16((b) + 32), E8H16((b) + 48)
static const union {
    uint32_t u[256];
    float f[256];
} e8m0_half = {{E8H64(0), E8H64(64), E8H64(128), E8H64(192)}};

/* A pair's codes as bytes u = 2 x E2M1 + 12: lo the even columns (A's in the low lane,
 * B's in the high one), hi the odd. The last block of an odd count reads only its own 16
 * bytes (B's codes 0, times its zero inputs). */
INLINE void q8_codes(const unsigned char *row, int64_t k, bool single, __m256i *lo, __m256i *hi)
{
    /* 12 + 2 x E2M1: 12 + (0 1 2 3 4 6 8 12) and 12 - (0 1 2 3 4 6 8 12) */
    const __m256i tbl = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12,
                                         13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i raw = single ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(row + k / 2)))
                         : _mm256_loadu_si256((const __m256i *)(const void *)(row + k / 2));
    *lo = _mm256_shuffle_epi8(tbl, _mm256_and_si256(raw, m4));
    *hi = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
}

/* Lane l: sum over the 8 columns of run l of u x q (u = 2 x E2M1 + 12, bytes; q int8),
 * exact. VNNI: vpdpbusd adds 4 products a lane, the evens then the odds. AVX2: vpmaddubsw
 * adds pairs into 16 bits (|u q + u q| <= 6096, no saturation), the evens' and odds' pairs
 * added (<= 12192), then vpmaddwd sums neighbours into the lane. */
INLINE __m256i q8_dot8(__m256i lo, __m256i hi, __m256i qe, __m256i qo)
{
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, qe), hi, qo);
#else
    __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, qe), _mm256_maddubs_epi16(hi, qo));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
#endif
}

INLINE void q8_tile_rs(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t rs,
                       int64_t t0, const tile_span *sp)
{
    const sp_weight *w = j->w;
    const int64_t n = w->cols, nb = n / 32, rb = SP_MM_Q8_BYTES(n);
    const unsigned char *xq = (const unsigned char *)j->xp + t0 * rb;
    const unsigned char *rows[8], *sc[8];
    __m256 acc[8][8];
    tile_start(R, T, w, r0, rs, t0, sp, rows, sc, acc);
    for (int64_t k = sp->k0, p = k / 64 * SP_MM_Q8_PAIR; k < sp->k1; k += 64, p += SP_MM_Q8_PAIR) {
        const bool single = k / 32 + 1 == nb;
        if (T <= 2)
            for (int r = 0; r < R; r++)
                _mm_prefetch((const char *)(rows[r] + k / 2 + DECODE_PF_BYTES), _MM_HINT_T0);
        for (int r = 0; r < R; r++) {
            __m256i lo, hi;
            q8_codes(rows[r], k, single, &lo, &hi);
            const unsigned char *s = sc[r] + k / 32;
            __m256 sh = _mm256_setr_m128(_mm_broadcast_ss(&e8m0_half.f[s[0]]),
                                         _mm_broadcast_ss(&e8m0_half.f[single ? 0 : s[1]]));
            for (int t = 0; t < T; t++) {
                const unsigned char *xt = xq + t * rb + p;
                __m256i qe = _mm256_loadu_si256((const __m256i *)(const void *)xt);
                __m256i qo = _mm256_loadu_si256((const __m256i *)(const void *)(xt + 32));
                __m256 dx = _mm256_loadu_ps((const float *)(const void *)(xt + 64));
                __m256i c = _mm256_loadu_si256((const __m256i *)(const void *)(xt + 96));
                __m256i dot = _mm256_sub_epi32(q8_dot8(lo, hi, qe, qo), c);
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sh, dx), acc[r][t]);
            }
        }
    }
    store_tile(R, T, j, r0, rs, t0, sp, acc);
}

TILE_FN(q8_tile, 4, 1)
TILE_FN(q8_tile, 2, 2)
TILE_FN(q8_tile, 1, 1)
TILE_FN(q8_tile, 1, 2)
TILE_FN(q8_tile, 1, 3)
TILE_FN(q8_tile, 1, 4)
TILE_FN(q8_tile, 1, 5)
TILE_FN(q8_tile, 1, 6)
TILE_FN(q8_tile, 1, 7)
TILE_FN(q8_tile, 1, 8)
STRIDED_FN(q8_tile, 4, 1)
STRIDED_FN(q8_tile, 2, 2)

/* The tiles (R rows x T tokens): with 16 vector registers (AVX2) as measured on a Zen 3
 * core (matmul_avx2.c); with 32 (AVX-512VL, matmul_avx512vnni.c) more rows share each
 * token's loads and more tokens each row's decoded codes. One Emerald Rapids core, 1280 x
 * 768, ms for 3 / 4 / 5 / 6 / 8 / 64 tokens: AVX2's set 0.065 / 0.097 / 0.111 / 0.127 /
 * 0.186 / 1.500, this one 0.060 / 0.082 / 0.092 / 0.117 / 0.168 / 1.385 (4 x 2 and 2 x 5
 * were slower than 2 x 2 and 3 x 5). */
#if defined(__AVX512VL__)
TILE_FN(q8_tile, 4, 3)
TILE_FN(q8_tile, 4, 4)
TILE_FN(q8_tile, 3, 5)
TILE_FN(q8_tile, 3, 6)
TILE_FN(q8_tile, 2, 7)
TILE_FN(q8_tile, 2, 8)
STRIDED_FN(q8_tile, 4, 3)
STRIDED_FN(q8_tile, 4, 4)
STRIDED_FN(q8_tile, 3, 5)
STRIDED_FN(q8_tile, 3, 6)
STRIDED_FN(q8_tile, 2, 7)
STRIDED_FN(q8_tile, 2, 8)
static const tile_set q8_tiles = {
    8, {0, 4, 2, 4, 4, 3, 3, 2, 2},
    {NULL, q8_tile_4x1, q8_tile_2x2, q8_tile_4x3, q8_tile_4x4, q8_tile_3x5, q8_tile_3x6, q8_tile_2x7, q8_tile_2x8},
    {NULL, q8_tile_1x1, q8_tile_1x2, q8_tile_1x3, q8_tile_1x4, q8_tile_1x5, q8_tile_1x6,
     q8_tile_1x7, q8_tile_1x8},
    {NULL, q8_tile_4x1_strided, q8_tile_2x2_strided, q8_tile_4x3_strided, q8_tile_4x4_strided,
     q8_tile_3x5_strided, q8_tile_3x6_strided, q8_tile_2x7_strided, q8_tile_2x8_strided},
    0};
#else
TILE_FN(q8_tile, 2, 3)
STRIDED_FN(q8_tile, 2, 3)
static const tile_set q8_tiles = {
    8, {0, 4, 2, 2, 1, 1, 1, 1, 1},
    {NULL, q8_tile_4x1, q8_tile_2x2, q8_tile_2x3, NULL, NULL, NULL, NULL, NULL},
    {NULL, q8_tile_1x1, q8_tile_1x2, q8_tile_1x3, q8_tile_1x4, q8_tile_1x5, q8_tile_1x6,
     q8_tile_1x7, q8_tile_1x8},
    {NULL, q8_tile_4x1_strided, q8_tile_2x2_strided, q8_tile_2x3_strided},
    0};
#endif

/* Calls of 2-8 tokens (a verify pass's experts, mostly) have strided tiles too (the AVX2
 * set's 1 x T tiles of 4+ tokens are single rows already): they took the prefill loop's
 * blocks of neighbouring rows, two to four short row streams side by side, which the
 * hardware prefetcher follows badly from memory. Two threads, 8192 x 2880 from DRAM, 2 / 3
 * / 4 / 6 / 8 tokens 1.11 / 1.25 / 2.14 / 2.50 / 2.74 -> 0.57 / 0.67 / 0.95 / 1.35 / 1.84 ms;
 * the gpt-oss-shaped MoE's verify of 5 tokens 14.8-15.4 -> 12.7-13.4 ms (2.71 -> 2.40
 * decode steps). */
static void rows_mxfp4_q8(const sp_mm_job *j, int64_t rb, int64_t re)
{
    tiles_loop(j, &q8_tiles, rb, re);
}

#endif
