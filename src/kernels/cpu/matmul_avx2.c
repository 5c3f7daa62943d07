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
 * (SP_MM_PREP_Q8, integer block sums: the section below). The tile (R rows x T tokens) only groups the work: each weight
 * vector is decoded once per tile and multiplied into its T tokens' inputs, so an output
 * element's bits do not depend on the batch. Other formats and widths use
 * matmul_tiles.h's kernels (8 lanes in column order). */
#include "kernels/cpu/matmul_tiles.h"

#if !SP_SIMD_AVX2
#error "matmul_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif

#define INLINE static inline __attribute__((always_inline))

/* Offsets in a prepared (SP_MM_PREP_PAIRS) 32-column block of the inputs that pair with
 * the BF16 chunks q = 0..3: even columns 0..14, odd 1..15, even 16..30, odd 17..31. */
static const int64_t x_off[4] = {0, 16, 8, 24};

/* Tokens per cache block: the block's inputs (fp32) stay within ~256 KiB of L2. */
static int64_t token_block(int64_t cols)
{
    int64_t tb = (65536 / cols) / 6 * 6;
    return tb < 6 ? 6 : tb > 60 ? 60 : tb;
}

/* The tile's rows are r0, r0 + rs, .., r0 + (R - 1) rs (rs = 1 but for the one-token
 * tiles whose rows are S apart, below). */
INLINE void store_tile(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t rs,
                       int64_t t0, __m256 acc[8][8])
{
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            j->y[(t0 + t) * j->w->rows + r0 + r * rs] =
                sp_v8_hsum(acc[r][t]) + (j->bias ? j->bias[r0 + r * rs] : 0.0f);
}

/* The rows of an R x T tile at r0 (and their scale rows, when sc is not NULL), and its
 * accumulators zeroed. */
INLINE void tile_start(const int R, const int T, const sp_weight *w, int64_t r0, int64_t rs,
                       const unsigned char **rows, const unsigned char **sc, __m256 acc[8][8])
{
    for (int r = 0; r < R; r++) {
        rows[r] = sp_weight_row(w, r0 + r * rs);
        if (sc)
            sc[r] = w->scales + (size_t)(r0 + r * rs) * w->scale_row_bytes;
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();
    }
}

/* One token: the rows of a tile are taken S rows apart (S = the range's rows over R), so
 * that each of the tile's R weight streams runs through S consecutive rows, a long
 * sequential stretch the hardware prefetcher follows, instead of R neighbouring rows read
 * side by side (R streams a row apart that end with the tile; short rows gave the
 * prefetcher too little of each to follow). The rows' arithmetic is the R x 1 tile's: the
 * order only changes which rows share a tile. Measured on the Zen 3 VM (2026-11-27,
 * alternating builds), BF16 8 x 1: decode of llama 125M 73-89 -> 109-124 tok/s, of llama
 * 1.1B 10.2-12.3 -> 11.8-14.9, of the gpt-oss-shaped MoE 76-92 -> 99-124; the 8-bit MXFP4
 * 4 x 1 the same way (it replaced a software prefetch of the next tile's lines): MoE
 * decode median 91 -> 100 tok/s over 8 alternating rounds (77-128 either way); the exact
 * precision's MXFP4 4 x 1 too: MoE decode in exact precision 59-66 -> 64-75. */

/* ---- BF16 ---------------------------------------------------------------------------- */

INLINE __m256 bf16_chunk(const unsigned char *row, int64_t k, int q)
{
    __m256i d = _mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * k + (q >> 1) * 32));
    return _mm256_castsi256_ps(q & 1 ? _mm256_and_si256(d, _mm256_set1_epi32((int)0xffff0000u))
                                     : _mm256_slli_epi32(d, 16));
}

INLINE void bf16_tile_rs(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t rs,
                         int64_t t0)
{
    const int64_t n = j->w->cols;
    const float *xs = (const float *)j->xp + t0 * n;
    const unsigned char *rows[8];
    __m256 acc[8][8];
    tile_start(R, T, j->w, r0, rs, rows, NULL, acc);
    for (int64_t k = 0; k < n; k += 32)
        for (int q = 0; q < 4; q++)
            for (int r = 0; r < R; r++) {
                __m256 wv = bf16_chunk(rows[r], k, q);
                for (int t = 0; t < T; t++)
                    acc[r][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xs + t * n + k + x_off[q]), acc[r][t]);
            }
    store_tile(R, T, j, r0, rs, t0, acc);
}

INLINE void bf16_tile(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t t0)
{
    bf16_tile_rs(R, T, j, r0, 1, t0);
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
                          int64_t t0)
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
    tile_start(R, T, w, r0, rs, rows, sc, acc);
    for (int64_t k = 0; k < n; k += 32)
        for (int r = 0; r < R; r++) {
            __m256 wv[4];
            mxfp4_block(rows[r], sc[r], k, tlo, thi, wv);
            for (int q = 0; q < 4; q++)
                for (int t = 0; t < T; t++)
                    acc[r][t] = _mm256_fmadd_ps(wv[q], _mm256_loadu_ps(xs + t * n + k + 8 * q), acc[r][t]);
        }
    store_tile(R, T, j, r0, rs, t0, acc);
}

INLINE void mxfp4_tile(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t t0)
{
    mxfp4_tile_rs(R, T, j, r0, 1, t0);
}

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
static void prep_q8_avx2(const float *x, int64_t cols, void *out)
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

INLINE void q8_tile_rs(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t rs,
                       int64_t t0)
{
    const __m256i ones = _mm256_set1_epi16(1);
    const sp_weight *w = j->w;
    const int64_t n = w->cols, nb = n / 32, rb = SP_MM_Q8_BYTES(n);
    const unsigned char *xq = (const unsigned char *)j->xp + t0 * rb;
    const unsigned char *rows[8], *sc[8];
    __m256 acc[8][8];
    tile_start(R, T, w, r0, rs, rows, sc, acc);
    for (int64_t k = 0, p = 0; k < n; k += 64, p += SP_MM_Q8_PAIR) {
        const bool single = k / 32 + 1 == nb;
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
                __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, qe), _mm256_maddubs_epi16(hi, qo));
                __m256 dx = _mm256_loadu_ps((const float *)(const void *)(xt + 64));
                __m256i c = _mm256_loadu_si256((const __m256i *)(const void *)(xt + 96));
                __m256i dot = _mm256_sub_epi32(_mm256_madd_epi16(p16, ones), c);
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sh, dx), acc[r][t]);
            }
        }
    }
    store_tile(R, T, j, r0, rs, t0, acc);
}

INLINE void q8_tile(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t t0)
{
    q8_tile_rs(R, T, j, r0, 1, t0);
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
 * 31-33). */

#define TILE_FN SP_MM_TILE_FN
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
TILE_FN(q8_tile, 4, 1)
TILE_FN(q8_tile, 2, 2)
TILE_FN(q8_tile, 2, 3)
TILE_FN(q8_tile, 1, 1)
TILE_FN(q8_tile, 1, 2)
TILE_FN(q8_tile, 1, 3)
TILE_FN(q8_tile, 1, 4)
TILE_FN(q8_tile, 1, 5)
TILE_FN(q8_tile, 1, 6)
TILE_FN(q8_tile, 1, 7)
TILE_FN(q8_tile, 1, 8)

/* tile_Rx1_strided(j, r0, rs): the one-token R x 1 tile over rows r0, r0 + rs, .. (above). */
#define STRIDED_FN(tile, R)                                                                    \
    static __attribute__((noinline)) void tile##_##R##x1_strided(const sp_mm_job *j, int64_t r0, \
                                                                  int64_t rs)                  \
    {                                                                                          \
        tile##_rs(R, 1, j, r0, rs, 0);                                                         \
    }
STRIDED_FN(bf16_tile, 8)
STRIDED_FN(mxfp4_tile, 4)
STRIDED_FN(q8_tile, 4)

#define ROW_BLOCK 24

typedef void (*tile_fn)(const sp_mm_job *j, int64_t r0, int64_t t0);
typedef void (*strided_fn)(const sp_mm_job *j, int64_t r0, int64_t rs);

/* The tiles of one format: for T = 1..max_t tokens, R[T] rows at a time (group[T]) and
 * one row (single[T]); one token's R[1] rows S apart (strided). */
typedef struct tile_set {
    int max_t;
    int R[9];
    tile_fn group[9], single[9];
    strided_fn strided;
} tile_set;

static const tile_set bf16_tiles = {
    3, {0, 8, 4, 3, 0, 0, 0},
    {NULL, bf16_tile_8x1, bf16_tile_4x2, bf16_tile_3x3, NULL, NULL, NULL},
    {NULL, bf16_tile_1x1, bf16_tile_1x2, bf16_tile_1x3, NULL, NULL, NULL},
    bf16_tile_8x1_strided};
static const tile_set mxfp4_tiles = {
    6, {0, 4, 4, 3, 2, 1, 1},
    {NULL, mxfp4_tile_4x1, mxfp4_tile_4x2, mxfp4_tile_3x3, mxfp4_tile_2x4, NULL, NULL},
    {NULL, mxfp4_tile_1x1, mxfp4_tile_1x2, mxfp4_tile_1x3, mxfp4_tile_1x4, mxfp4_tile_1x5,
     mxfp4_tile_1x6},
    mxfp4_tile_4x1_strided};

static const tile_set q8_tiles = {
    8, {0, 4, 2, 2, 1, 1, 1, 1, 1},
    {NULL, q8_tile_4x1, q8_tile_2x2, q8_tile_2x3, NULL, NULL, NULL, NULL, NULL},
    {NULL, q8_tile_1x1, q8_tile_1x2, q8_tile_1x3, q8_tile_1x4, q8_tile_1x5, q8_tile_1x6,
     q8_tile_1x7, q8_tile_1x8},
    q8_tile_4x1_strided};

/* Rows [rb, re) of T tokens from t0: R-row tiles, then single rows. */
static void rows_of_tiles(const sp_mm_job *j, const tile_set *ts, int T, int64_t rb, int64_t re,
                          int64_t t0)
{
    int64_t r = rb;
    if (ts->R[T] > 1)
        for (; r + ts->R[T] <= re; r += ts->R[T])
            ts->group[T](j, r, t0);
    for (; r < re; r++)
        ts->single[T](j, r, t0);
}

static void tiles_loop(const sp_mm_job *j, const tile_set *ts, int64_t rb, int64_t re)
{
    const int64_t n_tok = j->n_tok, tb_n = token_block(j->w->cols), R = ts->R[1];
    if (n_tok == 1 && re - rb >= 2 * R) { /* rows S apart; fewer than R left after */
        const int64_t S = (re - rb) / R;
        for (int64_t r = rb; r < rb + S; r++)
            ts->strided(j, r, S);
        rb += R * S;
    }
    for (int64_t tb = 0; tb < n_tok; tb += tb_n) {
        int64_t te = tb + tb_n < n_tok ? tb + tb_n : n_tok;
        for (int64_t r = rb; r < re; r += ROW_BLOCK) {
            int64_t r1 = r + ROW_BLOCK < re ? r + ROW_BLOCK : re;
            for (int64_t t = tb; t < te; t += ts->max_t) {
                int T = te - t < ts->max_t ? (int)(te - t) : ts->max_t;
                rows_of_tiles(j, ts, T, r, r1, t);
            }
        }
    }
}

static void rows_bf16_pairs(const sp_mm_job *j, int64_t rb, int64_t re)
{
    tiles_loop(j, &bf16_tiles, rb, re);
}

static void rows_mxfp4_quads(const sp_mm_job *j, int64_t rb, int64_t re)
{
    tiles_loop(j, &mxfp4_tiles, rb, re);
}

static void rows_mxfp4_q8(const sp_mm_job *j, int64_t rb, int64_t re)
{
    tiles_loop(j, &q8_tiles, rb, re);
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
        return (sp_mm_kernel){rows_mxfp4_q8, SP_MM_PREP_Q8, "avx2 mxfp4 q8", prep_q8_avx2};
    return sp_mm_pick_avx2(w);
}

sp_mm_kernel sp_mm_pick_avx2_unprepared(const sp_weight *w)
{
    return pick_tiles(w, "avx2");
}
