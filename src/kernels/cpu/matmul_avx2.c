/* matmul_avx2.c: the 8-lane row kernels compiled with -mavx2 -mfma -mf16c (see
 * CMakeLists.txt); called only when cpuid reports those (cpu_isa.c).
 *
 * BF16 and MXFP4 weights whose width is a multiple of 32 are decoded with as few
 * instructions as their layout allows, the input prepared once per call in the order the
 * decoded weights come out (matmul_isa.h):
 *   BF16 (SP_MM_PREP_PAIRS): a 32-byte load holds 8 column pairs, column 2i in a dword's
 *     low half (<< 16) and 2i+1 in its high half (& 0xffff0000), as in matmul_avx512.c.
 *   MXFP4 (SP_MM_PREP_QUADS): a block's 16 code bytes go through two byte tables and two
 *     interleaves (below), 8 consecutive columns a vector in the order 0 2 4 6 1 3 5 7.
 * Within each 32-column block lane l of an accumulator takes its column of each of the
 * four decoded vectors in turn (fused multiply-adds); the 8 lanes are added in simd.h's
 * fixed tree at the end. The fast precision's MXFP4 products take 8-bit inputs instead
 * (SP_MM_PREP_Q8, integer block sums: matmul_q8.h). The tile (R rows x T tokens) only
 * groups the work: each weight vector is decoded once per tile and multiplied into its T
 * tokens' inputs, so an output element's bits do not depend on the batch. Other formats and widths use
 * matmul_tiles.h's kernels (8 lanes in column order). */
#include "kernels/cpu/matmul_tiles.h"
#include "kernels/cpu/matmul_avx2_tiles.h"
#include "kernels/cpu/matmul_q8.h"

#if !SP_SIMD_AVX2
#error "matmul_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif


/* Offsets in a prepared (SP_MM_PREP_PAIRS) 32-column block of the inputs that pair with
 * the BF16 chunks q = 0..3: even columns 0..14, odd 1..15, even 16..30, odd 17..31. */
static const int64_t x_off[4] = {0, 16, 8, 24};

/* ---- BF16 ---------------------------------------------------------------------------- */

INLINE __m256 bf16_chunk(const unsigned char *row, int64_t k, int q)
{
    __m256i d = _mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * k + (q >> 1) * 32));
    return _mm256_castsi256_ps(q & 1 ? _mm256_and_si256(d, _mm256_set1_epi32((int)0xffff0000u))
                                     : _mm256_slli_epi32(d, 16));
}

INLINE void bf16_tile_rs(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t rs,
                         int64_t t0, const tile_span *sp)
{
    const int64_t n = j->w->cols;
    const float *xs = (const float *)j->xp + t0 * n;
    const unsigned char *rows[8], *next[8];
    __m256 acc[8][8];
    tile_start(R, T, j->w, r0, rs, t0, sp, rows, NULL, acc);
    const int np = next_block_rows(R, T, j->w, r0, t0, sp, next);
    for (int64_t k = sp->k0; k < sp->k1; k += 32) {
        if (T == 1)
            for (int r = 0; r < R; r++)
                _mm_prefetch((const char *)(rows[r] + 2 * k + DECODE_PF_BYTES), _MM_HINT_T0);
        for (int r = 0; r < np; r++)
            _mm_prefetch((const char *)(next[r] + 2 * k), _MM_HINT_T1);
        for (int q = 0; q < 4; q++)
            for (int r = 0; r < R; r++) {
                __m256 wv = bf16_chunk(rows[r], k, q);
                for (int t = 0; t < T; t++)
                    acc[r][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xs + t * n + k + x_off[q]), acc[r][t]);
            }
    }
    store_tile(R, T, j, r0, rs, t0, sp, acc);
}

/* ---- MXFP4 --------------------------------------------------------------------------- *
 * A block's 16 code bytes are looked up in two byte tables (vpshufb: the low and the high
 * byte of each code's value as bf16, exact for E2M1), the low nibbles in one 128-bit lane
 * and the high nibbles in the other; interleaving the bytes and then the 16-bit halves
 * with zeros gives fp32 values, 8 consecutive columns a vector in the order 0 2 4 6 1 3 5
 * 7 (SP_MM_PREP_QUADS puts the inputs in that order), each times the block's scale: the
 * reference decoder's product. Lane l of an accumulator takes, block after block, its
 * column of the block's first 8 columns, then of the next 8, and so on. */

INLINE __m256 e8m0_broadcast(uint32_t b)
{
    /* sp_e8m0_to_f32 without branches: 2^(b-127); b = 0 is 2^-127, b = 255 NaN */
    uint32_t u = b << 23;
    u = b == 0 ? 0x00400000u : u;
    u = b == 0xff ? 0x7fc00000u : u;
    return _mm256_castsi256_ps(_mm256_set1_epi32((int)u));
}

/* The 32 codes of row `row`'s block at column k, one a byte: the low nibbles (even
 * columns 0, 2, .. 30) in the low 128-bit lane, the high nibbles (odd columns) in the high
 * one; the index vector of both decodes below. */
INLINE __m256i mxfp4_codes(const unsigned char *row, int64_t k)
{
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(row + k / 2)));
    return _mm256_and_si256(_mm256_blend_epi32(v, _mm256_srli_epi16(v, 4), 0xf0), _mm256_set1_epi8(0x0f));
}

/* The block of row `row` at column k as four vectors of 8 fp32 weights (see above). */
INLINE void mxfp4_block(const unsigned char *row, const unsigned char *scales, int64_t k,
                        __m256i tlo, __m256i thi, __m256 w[4])
{
    __m256i idx = mxfp4_codes(row, k);
    __m256i lo = _mm256_shuffle_epi8(tlo, idx), hi = _mm256_shuffle_epi8(thi, idx);
    __m256i w01 = _mm256_unpacklo_epi8(lo, hi), w23 = _mm256_unpackhi_epi8(lo, hi);
    __m256 s = e8m0_broadcast(scales[k / 32]);
    const __m256i z = _mm256_setzero_si256();
    w[0] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w01)), s);
    w[1] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w01)), s);
    w[2] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w23)), s);
    w[3] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w23)), s);
}

INLINE void mxfp4_tile_rs(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t rs,
                          int64_t t0, const tile_span *sp)
{
    /* bf16 bits of 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives: low bytes, high bytes */
    const __m256i tlo = _mm256_setr_epi8(0, 0, (char)0x80, (char)0xc0, 0, 0x40, (char)0x80, (char)0xc0, 0, 0,
                                         (char)0x80, (char)0xc0, 0, 0x40, (char)0x80, (char)0xc0, 0, 0,
                                         (char)0x80, (char)0xc0, 0, 0x40, (char)0x80, (char)0xc0, 0, 0,
                                         (char)0x80, (char)0xc0, 0, 0x40, (char)0x80, (char)0xc0);
    const __m256i thi = _mm256_setr_epi8(
        0, 0x3f, 0x3f, 0x3f, 0x40, 0x40, 0x40, 0x40, (char)0x80, (char)0xbf, (char)0xbf, (char)0xbf,
        (char)0xc0, (char)0xc0, (char)0xc0, (char)0xc0, 0, 0x3f, 0x3f, 0x3f, 0x40, 0x40, 0x40, 0x40,
        (char)0x80, (char)0xbf, (char)0xbf, (char)0xbf, (char)0xc0, (char)0xc0, (char)0xc0, (char)0xc0);
    const sp_weight *w = j->w;
    const int64_t n = w->cols;
    const float *xs = (const float *)j->xp + t0 * n;
    const unsigned char *rows[8], *sc[8];
    __m256 acc[8][8];
    tile_start(R, T, w, r0, rs, t0, sp, rows, sc, acc);
    for (int64_t k = sp->k0; k < sp->k1; k += 32)
        for (int r = 0; r < R; r++) {
            __m256 wv[4];
            mxfp4_block(rows[r], sc[r], k, tlo, thi, wv);
            for (int q = 0; q < 4; q++)
                for (int t = 0; t < T; t++)
                    acc[r][t] = _mm256_fmadd_ps(wv[q], _mm256_loadu_ps(xs + t * n + k + 8 * q), acc[r][t]);
        }
    store_tile(R, T, j, r0, rs, t0, sp, acc);
}

/* ---- the loop over rows and tokens ---------------------------------------------------
 * Token blocks outermost (their inputs stay in cache), then blocks of 24 rows (their
 * weights stay in L2 while the block's tokens pass), then tiles of up to 3 (BF16) or 6
 * (MXFP4) tokens; rows left over go one at a time. The shapes were measured on a Zen 3
 * core with the data in L1 (2026-11-27, bench: one core's tiles over 768 and 2048
 * columns): BF16 wants its inputs shared by several rows in registers (8 x 1 49 GFLOP/s,
 * 4 x 2 61-81, 3 x 3 71-86 = 75-90% of the FMA peak; 2 x 4 53-69, 2 x 5 51-54, 4 x 3
 * 58-63, one row of 6-8 tokens 36-57), so a prefill runs 3 x 3 tiles and a 5-token verify
 * 3 x 3 then 4 x 2; MXFP4 is bound by its decode, shared by a row's tokens (4 x 1 13-21,
 * 4 x 2 22-29, 3 x 3 31-38, 2 x 4 31-49, one row of 5 or 6 tokens 39-46; two rows of 5
 * 31-33).
 * BF16 rows longer than 2048 columns take their columns in spans of 2048 (tiles_loop),
 * so that a 3 x 3 tile's inputs (24 KiB) stay in L1: one Emerald Rapids core, 2048 x 8192
 * at 120 tokens, 57.5 -> 61.3 GFLOP/s (2048 x 2048: 66); llama 1.1B prefill of 128 at the
 * avx2 level 60.5 -> 62.1 tok/s (2026-11-28, alternating). A 2 x 6 tile with spans was
 * 2-3% faster on aligned matrices but not on the checkpoint's, nor in the model. */

#define TILE_FNS(tile)                                                                         \
    TILE_FN(tile, 4, 2)                                                                        \
    TILE_FN(tile, 3, 3)                                                                        \
    TILE_FN(tile, 1, 1)                                                                        \
    TILE_FN(tile, 1, 2)                                                                        \
    TILE_FN(tile, 1, 3)
TILE_FNS(bf16_tile)
TILE_FN(bf16_tile, 8, 1)
TILE_FNS(mxfp4_tile)
TILE_FN(mxfp4_tile, 4, 1)
TILE_FN(mxfp4_tile, 2, 4)
TILE_FN(mxfp4_tile, 1, 4)
TILE_FN(mxfp4_tile, 1, 5)
TILE_FN(mxfp4_tile, 1, 6)
STRIDED_FN(bf16_tile, 8, 1)
STRIDED_FN(mxfp4_tile, 4, 1)

static const tile_set bf16_tiles = {
    3, {0, 8, 4, 3, 0, 0, 0},
    {NULL, bf16_tile_8x1, bf16_tile_4x2, bf16_tile_3x3, NULL, NULL, NULL},
    {NULL, bf16_tile_1x1, bf16_tile_1x2, bf16_tile_1x3, NULL, NULL, NULL},
    {NULL, bf16_tile_8x1_strided},
    2048};
static const tile_set mxfp4_tiles = {
    6, {0, 4, 4, 3, 2, 1, 1},
    {NULL, mxfp4_tile_4x1, mxfp4_tile_4x2, mxfp4_tile_3x3, mxfp4_tile_2x4, NULL, NULL},
    {NULL, mxfp4_tile_1x1, mxfp4_tile_1x2, mxfp4_tile_1x3, mxfp4_tile_1x4, mxfp4_tile_1x5,
     mxfp4_tile_1x6},
    {NULL, mxfp4_tile_4x1_strided},
    0};

static void rows_bf16_pairs(const sp_mm_job *j, int64_t rb, int64_t re)
{
    tiles_loop(j, &bf16_tiles, rb, re);
}

static void rows_mxfp4_quads(const sp_mm_job *j, int64_t rb, int64_t re)
{
    tiles_loop(j, &mxfp4_tiles, rb, re);
}

sp_mm_kernel sp_mm_pick_avx2(const sp_weight *w)
{
    if (w->cols % 32 == 0) {
        if (w->format == SP_WF_BF16)
            return (sp_mm_kernel){rows_bf16_pairs, SP_MM_PREP_PAIRS, "avx2 bf16 pairs", NULL};
        if (w->format == SP_WF_MXFP4)
            return (sp_mm_kernel){rows_mxfp4_quads, SP_MM_PREP_QUADS, "avx2 mxfp4 quads", NULL};
    }
    return pick_tiles(w, "avx2");
}

sp_mm_kernel sp_mm_pick_avx2_fast(const sp_weight *w)
{
    if (w->format == SP_WF_MXFP4 && w->cols % 32 == 0)
        return (sp_mm_kernel){rows_mxfp4_q8, SP_MM_PREP_Q8, "avx2 mxfp4 q8", prep_q8};
    return sp_mm_pick_avx2(w);
}

sp_mm_kernel sp_mm_pick_avx2_unprepared(const sp_weight *w)
{
    return pick_tiles(w, "avx2");
}
