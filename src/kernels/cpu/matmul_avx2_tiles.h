/* matmul_avx2_tiles.h: the plumbing of the 8-lane row kernels compiled with AVX2 (a
 * tile's rows and accumulators, its store, the tile sets and the loop over rows and
 * tokens), included by matmul_avx2.c and matmul_avx512vnni.c so that their kernels group
 * work and store results in the same way. Each includer is compiled with at least
 * -mavx2 -mfma and defines its tiles before its tile sets. */
#ifndef SP_KERNELS_CPU_MATMUL_AVX2_TILES_H
#define SP_KERNELS_CPU_MATMUL_AVX2_TILES_H

#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/simd.h"

#include <immintrin.h>

#if !SP_SIMD_AVX2
#error "matmul_avx2_tiles.h needs -mavx2 -mfma"
#endif

#ifndef INLINE
#define INLINE static inline __attribute__((always_inline))
#endif

/* Tokens per cache block: the block's inputs (fp32) over `cols` columns stay within ~256
 * KiB of L2. */
static int64_t token_block(int64_t cols)
{
    int64_t tb = (65536 / cols) / 6 * 6;
    return tb < 6 ? 6 : tb > 60 ? 60 : tb;
}

/* The columns [k0, k1) that one call of a tile covers. A prefill over long rows takes
 * them in spans (tile_set.span_cols), so that a tile's inputs stay in L1 while it passes
 * its rows; between spans the tile's accumulators wait, unreduced, in keep (the vector of
 * row r and token t at keep[(t - t_base) * ROW_BLOCK + r - r_base]). Each lane then takes
 * the same products in the same order as over the whole row: the same bits. */
typedef struct tile_span {
    int64_t k0, k1;
    __m256 *keep; /* NULL: one span, the whole row */
    int64_t r_base, t_base;
} tile_span;

#define ROW_BLOCK 24

INLINE __m256 *kept(const tile_span *sp, int64_t r, int64_t t)
{
    return sp->keep + (t - sp->t_base) * ROW_BLOCK + (r - sp->r_base);
}

/* The tile's rows are r0, r0 + rs, .., r0 + (R - 1) rs (rs = 1 but for the one-token
 * tiles whose rows are S apart, below). After a span that does not end the row the
 * accumulators are kept for the next one; after the last they are reduced and stored. */
INLINE void store_tile(const int R, const int T, const sp_mm_job *j, int64_t r0, int64_t rs,
                       int64_t t0, const tile_span *sp, __m256 acc[8][8])
{
    if (sp->k1 < j->w->cols) {
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++)
                *kept(sp, r0 + r, t0 + t) = acc[r][t];
        return;
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            j->y[(t0 + t) * j->w->rows + r0 + r * rs] =
                sp_v8_hsum(acc[r][t]) + (j->bias ? j->bias[r0 + r * rs] : 0.0f);
}

/* The rows of an R x T tile at r0 (and their scale rows, when sc is not NULL), and its
 * accumulators: zero at a row's first span, else as the span before left them. */
INLINE void tile_start(const int R, const int T, const sp_weight *w, int64_t r0, int64_t rs,
                       int64_t t0, const tile_span *sp, const unsigned char **rows,
                       const unsigned char **sc, __m256 acc[8][8])
{
    for (int r = 0; r < R; r++) {
        rows[r] = sp_weight_row(w, r0 + r * rs);
        if (sc)
            sc[r] = w->scales + (size_t)(r0 + r * rs) * w->scale_row_bytes;
        for (int t = 0; t < T; t++)
            acc[r][t] = sp->k0 > 0 ? *kept(sp, r0 + r, t0 + t) : _mm256_setzero_ps();
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

/* One token (and two, in the 8-bit MXFP4 tiles, whose experts in a verify pass often get
 * two: gpt-oss-shaped MoE, 2-5-token verify 6-10% faster): each weight stream is also
 * prefetched DECODE_PF_BYTES ahead of its loads, one line a row per step (a stream's row
 * continues into the next row S apart, so the prefetch runs on into it). With 256-bit loads the hardware prefetcher alone kept too
 * few lines in flight on an Emerald Rapids core (2026-11-28, 2 threads, 1 GiB of weights
 * rotated): BF16 8192 x 2048 25 -> 30-31 GB/s (512 and 1536 bytes ahead about the same,
 * 4096 27 GB/s), 8-bit MXFP4 8192 x 2880 24 -> 27-28 GB/s; llama 1.1B decode at the avx2
 * level 11.1 -> 14.1 tok/s. */
#define DECODE_PF_BYTES 1024

/* tile_RxT(j, r0, t0, sp): the R x T tile at row r0 and token t0 over the span sp. */
#define TILE_FN(tile, R, T)                                                                    \
    static __attribute__((noinline)) void tile##_##R##x##T(const sp_mm_job *j, int64_t r0,     \
                                                            int64_t t0, const tile_span *sp)   \
    {                                                                                          \
        tile##_rs(R, T, j, r0, 1, t0, sp);                                                     \
    }

/* tile_RxT_strided(j, r0, rs): the R x T tile of the first T tokens over rows r0, r0 + rs,
 * .. and whole rows (a small batch whose weights stream from memory: above). */
#define STRIDED_FN(tile, R, T)                                                                 \
    static __attribute__((noinline)) void tile##_##R##x##T##_strided(const sp_mm_job *j,      \
                                                                     int64_t r0, int64_t rs)   \
    {                                                                                          \
        const tile_span whole = {0, j->w->cols, NULL, 0, 0};                                   \
        tile##_rs(R, T, j, r0, rs, 0, &whole);                                                 \
    }

/* A prefill's tiles over a token block's first tokens (t0 on a token block's start) also
 * prefetch, into L2, the rows ROW_BLOCK further on that the next row block's tiles will
 * read (a tile's step reads one line of each row, and prefetches one of each next row): the
 * next block's weights arrive while this block's tokens are computed instead of when its
 * first tile starts. Returns how many of the tile's R rows have such a row (into next). */
INLINE int next_block_rows(const int R, const int T, const sp_weight *w, int64_t r0, int64_t t0,
                           const tile_span *sp, const unsigned char **next)
{
    int np = 0;
    if (T > 1 && t0 == sp->t_base)
        for (; np < R && r0 + np + ROW_BLOCK < w->rows; np++)
            next[np] = sp_weight_row(w, r0 + np + ROW_BLOCK);
    return np;
}

typedef void (*tile_fn)(const sp_mm_job *j, int64_t r0, int64_t t0, const tile_span *sp);
typedef void (*strided_fn)(const sp_mm_job *j, int64_t r0, int64_t rs);

/* The tiles of one format: for T = 1..max_t tokens, R[T] rows at a time (group[T]) and
 * one row (single[T]); a call of T tokens with strided[T] (one token always, a few where
 * the format gives it) takes its R[T] rows S apart instead (tiles_loop). Rows longer than
 * span_cols (0: no limit) go in spans of span_cols columns (a multiple of 64). */
typedef struct tile_set {
    int max_t;
    int R[9];
    tile_fn group[9], single[9];
    strided_fn strided[9];
    int64_t span_cols;
} tile_set;

/* Rows [rb, re) of T tokens from t0 over the span sp: R-row tiles, then single rows. */
static void rows_of_tiles(const sp_mm_job *j, const tile_set *ts, int T, int64_t rb, int64_t re,
                          int64_t t0, const tile_span *sp)
{
    int64_t r = rb;
    if (ts->R[T] > 1)
        for (; r + ts->R[T] <= re; r += ts->R[T])
            ts->group[T](j, r, t0, sp);
    for (; r < re; r++)
        ts->single[T](j, r, t0, sp);
}

/* Rows [r, r1) x tokens [tb, te) over columns [k0, k1) in tiles; keep as tile_span. */
static void block_of_tiles(const sp_mm_job *j, const tile_set *ts, int64_t r, int64_t r1, int64_t tb,
                           int64_t te, int64_t k0, int64_t k1, __m256 *keep)
{
    const tile_span sp = {k0, k1, keep, r, tb};
    for (int64_t t = tb; t < te; t += ts->max_t) {
        int T = te - t < ts->max_t ? (int)(te - t) : ts->max_t;
        rows_of_tiles(j, ts, T, r, r1, t, &sp);
    }
}

/* Rows [rb, re) x all tokens in token blocks, row blocks and spans of `span` columns. */
static void token_blocks(const sp_mm_job *j, const tile_set *ts, int64_t rb, int64_t re, int64_t span,
                         __m256 *keep)
{
    const int64_t n_tok = j->n_tok, n = j->w->cols, tb_n = token_block(span);
    for (int64_t tb = 0; tb < n_tok; tb += tb_n) {
        int64_t te = tb + tb_n < n_tok ? tb + tb_n : n_tok;
        for (int64_t r = rb; r < re; r += ROW_BLOCK) {
            int64_t r1 = r + ROW_BLOCK < re ? r + ROW_BLOCK : re;
            for (int64_t k = 0; k < n; k += span)
                block_of_tiles(j, ts, r, r1, tb, te, k, k + span < n ? k + span : n, keep);
        }
    }
}

/* A call of T tokens with strided[T] runs its rows S apart (S = the range's rows over R[T];
 * fewer than R[T] rows are left for the loop below), the rest in token blocks (their
 * inputs stay in cache), blocks of ROW_BLOCK rows (their weights stay in L2 while the
 * block's tokens pass), spans of columns (a tile's inputs stay in L1) and tiles. */
static void tiles_loop(const sp_mm_job *j, const tile_set *ts, int64_t rb, int64_t re)
{
    const int64_t n_tok = j->n_tok, n = j->w->cols;
    if (n_tok <= ts->max_t && ts->strided[n_tok] && re - rb >= 2 * ts->R[n_tok]) {
        const int64_t S = (re - rb) / ts->R[n_tok];
        for (int64_t r = rb; r < rb + S; r++)
            ts->strided[n_tok](j, r, S);
        rb += ts->R[n_tok] * S;
    }
    if (ts->span_cols > 0 && n > ts->span_cols) {
        _Alignas(32) __m256 keep[ROW_BLOCK * 60]; /* token_block's most tokens */
        token_blocks(j, ts, rb, re, ts->span_cols, keep);
    } else {
        token_blocks(j, ts, rb, re, n, NULL);
    }
}

#endif
