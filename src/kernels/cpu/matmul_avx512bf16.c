/* matmul_avx512bf16.c: row kernels of the fast precision, compiled with AVX512_BF16
 * (see CMakeLists.txt); called only when cpuid reports it (cpu_isa.c).
 *
 * The input arrives rounded to bf16 in tiles of 6 tokens (SP_MM_PREP_BF16_TILED, see
 * matmul_isa.h): a prefill tile reads its inputs as one sequential stream. Each vdpbf16ps
 * adds to fp32 lane l the products of columns 2l and 2l+1 of a 32-column step, so lane
 * l accumulates the pairs (2l, 2l+1) step after step in the instruction's fixed order.
 *
 * Reduction order: the columns are cut into blocks of KC (the last one shorter); within
 * a block the 16 lanes accumulate as above and are then added in a fixed tree (hsum16);
 * the block sums are added to the output in ascending block order, the bias last. It
 * depends on cols only, never on the batch, the tile or the thread count. Blocking the
 * columns is what lets prefill stream each weight panel from DRAM once per block of up
 * to 132 tokens while the inputs of a block stay in L2 and the tile's weights in L1.
 *
 * BF16 weights are used as stored. MXFP4 weights take 8-bit inputs instead
 * (matmul_avx512vnni.c); other formats use the exact kernels.
 *
 * The file is compiled twice: as itself (vdpbf16ps) and by matmul_avx512bf16_fma.c with
 * SP_BF16_DOT_FMA set, where each vdpbf16ps becomes two fp32 FMAs per lane, the odd
 * column's product then the even one's, with MXCSR's DAZ and FTZ set around the products:
 * exactly the instruction's arithmetic (its products of two bf16 are exact in fp32; it
 * adds them one at a time, rounding to nearest even, denormal inputs read as zero and
 * denormal results flushed; the same bits as vdpbf16ps on 30M random cases over every
 * exponent, NaN payloads aside). The inputs of that instance arrive widened to fp32 and
 * split into even and odd columns (SP_MM_PREP_BF16_SPLIT), so a tile's only extra work
 * is splitting each weight vector in two. It is the faster one where vdpbf16ps is slow
 * (one every two cycles on Intel's Sapphire and Emerald Rapids cores, against two FMAs a
 * cycle); matmul.c picks by sp_mm_vdpbf16ps_is_slow or SPECULA_BF16_DOT.
 *
 * Every tile shape is its own non-inlined function: inlined into one loop nest, GCC
 * re-loaded the inputs for every row of a tile (28 loads per 24 vdpbf16ps instead of 10). */
#include "kernels/cpu/matmul_isa.h"
#include "util/clock.h"
#include "util/dtype.h"

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#ifndef SP_BF16_DOT_FMA
#define SP_BF16_DOT_FMA 0 /* 1: matmul_avx512bf16_fma.c's instance */
#endif

#define INLINE static inline __attribute__((always_inline))
#define NOINLINE static __attribute__((noinline))

enum {
    KC = 2048, /* columns per reduction block (a multiple of 32) */
    TB = 132,  /* most tokens per cache block (whole tiles): KC inputs of TB tokens, 528 KiB (1 MiB split) */
    TR = 4,    /* rows x tokens of the prefill tile (24 of the 32 zmm accumulate) */
    TT = SP_MM_TILE_TOKENS,
    DR = 8,    /* rows of the decode tiles (8 x 1..3 tokens): independent DRAM streams */
};
_Static_assert(TT == 6 && TB % TT == 0, "token blocks hold whole input tiles");
#define PF_AHEAD 1024 /* columns a decode tile prefetches ahead (DR rows: 16 KiB) */

#if SP_BF16_DOT_FMA
typedef float x_elem; /* SP_MM_PREP_BF16_SPLIT: bf16 values widened, evens then odds */
#define KERNEL_NAME(s) "avx512bf16 " s " fma-dot"
#define PICK sp_mm_pick_avx512bf16_fma
#define PREP SP_MM_PREP_BF16_SPLIT
#else
typedef uint16_t x_elem; /* SP_MM_PREP_BF16_TILED */
#define KERNEL_NAME(s) "avx512bf16 " s " dot"
#define PICK sp_mm_pick_avx512bf16
#define PREP SP_MM_PREP_BF16_TILED
#endif

/* vdpbf16ps as two FMAs needs MXCSR's DAZ (bit 6: denormal inputs read as zero) and FTZ
 * (bit 15: denormal results flushed), which the instruction applies on its own. */
#define MXCSR_DAZ_FTZ 0x8040u

/* The prepared input of token t at column k (a multiple of 32): tokens t and t + 1 of a
 * tile are 32 elements apart, and *step elements lead from one 32-column step of a token
 * to the next (32 times the tokens of t's tile; 32 for a lone token). */
INLINE const x_elem *x_at(const sp_mm_job *j, int64_t t, int64_t k, int64_t *step)
{
    const int64_t t0 = t - t % TT, left = j->n_tok - t0;
    const int64_t T = left < TT ? left : TT;
    *step = 32 * T;
    return (const x_elem *)j->xp + t0 * j->w->cols + k * T + (t - t0) * 32;
}

INLINE float hsum16(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 0x55));
    return _mm_cvtss_f32(b);
}

/* hsum16 of four vectors at once, with the same pairings (lane i + lane i+8, then + i+4,
 * then + i+2, then + i+1; adds commute, so each sum is bit-identical to hsum16's): the
 * four sums in lanes 0-3. A quarter of the shuffles and adds of four hsum16. */
INLINE __m128 hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    /* 128-bit lane q holds the 8-sum halves of vector q (a, b, c, d) */
    __m512 v = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4e));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xb1));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0,
                                                                          0, 0, 0, 0, 0, 0),
                                                        v));
}

/* Adds the block sums of an R x T tile to y (the first block stores, the last adds the
 * bias): four rows of one token at a time when R is a multiple of 4, the same
 * operations on each element as the scalar path. */
INLINE void store_tile(const int R, const int T, __m512 acc[DR][TT], const sp_mm_job *j, int64_t r0,
                       int64_t t0, bool first, bool last)
{
    const int64_t rows = j->w->rows;
    if (R % 4 == 0) {
        for (int t = 0; t < T; t++)
            for (int r = 0; r < R; r += 4) {
                float *y = j->y + (t0 + t) * rows + r0 + r;
                __m128 s = hsum16x4(acc[r][t], acc[r + 1][t], acc[r + 2][t], acc[r + 3][t]);
                if (!first)
                    s = _mm_add_ps(_mm_loadu_ps(y), s);
                if (last && j->bias)
                    s = _mm_add_ps(s, _mm_loadu_ps(j->bias + r0 + r));
                _mm_storeu_ps(y, s);
            }
        return;
    }
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) {
            float *y = j->y + (t0 + t) * rows + r0 + r;
            float s = hsum16(acc[r][t]);
            if (!first)
                s = *y + s;
            if (last && j->bias)
                s += j->bias[r0 + r];
            *y = s;
        }
}

/* ---- BF16 rows --------------------------------------------------------------------- */

/* acc[r][t] over columns [0, len) of the R rows at w (ws bytes apart) and the T bf16
 * inputs at x (x_at's layout: tokens 32 apart, xstep elements per 32-column step). With
 * pf, each 32-column step also prefetches one line of each of the R rows `ahead` columns
 * further on: in these rows while that is inside the block, then in the block that comes
 * next (its rows at pf, ws apart, from its first column), so that weights arrive from
 * DRAM while earlier ones are used (the hardware prefetcher alone keeps too few lines in
 * flight for short row streams). ahead = len prefetches the whole next block during this
 * tile (a prefill's first tile); a decode tile looks PF_AHEAD columns ahead, about
 * 16 KiB in flight, which stays within L1 beside the lines being used. */
INLINE void dot_tile(const int R, const int T, const unsigned char *w, size_t ws, const x_elem *x,
                     int64_t xstep, int64_t len, const unsigned char *pf, int64_t ahead,
                     __m512 acc[DR][TT])
{
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
#if SP_BF16_DOT_FMA
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | MXCSR_DAZ_FTZ);
    for (int64_t k = 0; k < len; k += 32, x += xstep) {
        const int64_t kk = k + ahead;
        const unsigned char *pk = kk < len ? w + 2 * kk : pf + 2 * (kk - len);
        for (int r = 0; r < R; r++) {
            if (pf)
                _mm_prefetch((const char *)(pk + r * ws), _MM_HINT_T0);
            __m512i wv = _mm512_loadu_si512((const void *)(w + r * ws + 2 * k));
            __asm__("" : "+v"(wv)); /* one load, not one per split (weights are rarely aligned) */
            __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
            __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(wv, hi));
            for (int t = 0; t < T; t++) { /* vdpbf16ps's order: the odd column, then the even */
                acc[r][t] = _mm512_fmadd_ps(wo, _mm512_loadu_ps(x + 32 * t + 16), acc[r][t]);
                acc[r][t] = _mm512_fmadd_ps(we, _mm512_loadu_ps(x + 32 * t), acc[r][t]);
            }
        }
    }
    _mm_setcsr(csr);
#else
    for (int64_t k = 0; k < len; k += 32, x += xstep) {
        __m512bh xv[TT];
        for (int t = 0; t < T; t++)
            xv[t] = (__m512bh)_mm512_loadu_si512((const void *)(x + 32 * t));
        const int64_t kk = k + ahead;
        const unsigned char *pk = kk < len ? w + 2 * kk : pf + 2 * (kk - len);
        for (int r = 0; r < R; r++) {
            if (pf)
                _mm_prefetch((const char *)(pk + r * ws), _MM_HINT_T0);
            __m512bh wv = (__m512bh)_mm512_loadu_si512((const void *)(w + r * ws + 2 * k));
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xv[t]);
        }
    }
#endif
}

/* One R x T tile over columns [k0, k1): w points at column k0 of row r0; pf as dot_tile
 * (NULL: no prefetch, a branch the compiler removes), looking PF_AHEAD columns ahead in
 * the DR-row decode tiles and a whole block ahead in the others; the FMA instance always
 * PF_AHEAD (its fp32 inputs, twice the bytes, left L1 too little room for a whole block in
 * flight: 4 tokens over 2048 x 2048 took 0.57 ms that way, 0.39-0.44 so). */
#define DOT_FN(R, T)                                                                             \
    NOINLINE void dot_##R##x##T(const sp_mm_job *j, const unsigned char *w, size_t ws, int64_t r0, \
                                int64_t t0, int64_t k0, int64_t k1, const unsigned char *pf)   \
    {                                                                                          \
        __m512 acc[DR][TT];                                                                    \
        int64_t step;                                                                          \
        const x_elem *x = x_at(j, t0, k0, &step);                                              \
        const int64_t len = k1 - k0;                                                           \
        if (pf)                                                                                \
            dot_tile(R, T, w, ws, x, step, len, pf, (R == DR || SP_BF16_DOT_FMA) && len > PF_AHEAD ? PF_AHEAD : len,  \
                     acc);                                                                     \
        else                                                                                   \
            dot_tile(R, T, w, ws, x, step, len, NULL, 0, acc);                                 \
        store_tile(R, T, acc, j, r0, t0, k0 == 0, k1 == j->w->cols);                           \
    }
DOT_FN(8, 1)
DOT_FN(8, 2)
DOT_FN(8, 3)
DOT_FN(4, 6)
DOT_FN(4, 5)
DOT_FN(4, 4)
DOT_FN(4, 3)
DOT_FN(4, 2)
DOT_FN(4, 1)
DOT_FN(1, 1)

typedef void (*dot_fn)(const sp_mm_job *, const unsigned char *, size_t, int64_t, int64_t, int64_t,
                       int64_t, const unsigned char *);
static const dot_fn dot_4xT[TT + 1] = {NULL, dot_4x1, dot_4x2, dot_4x3, dot_4x4, dot_4x5, dot_4x6};

/* Tokens [tb, te) x rows [r, r + TR) over columns [k0, k1), in tiles of TT tokens; the
 * first tile prefetches the next block's weights (pf, NULL: none). */
static void dot_rows4(const sp_mm_job *j, const unsigned char *w, size_t ws, int64_t r, int64_t tb,
                      int64_t te, int64_t k0, int64_t k1, const unsigned char *pf)
{
    for (int64_t t = tb; t < te; t += TT, pf = NULL)
        dot_4xT[te - t < TT ? te - t : TT](j, w, ws, r, t, k0, k1, pf);
}

/* Loop order of a token block: when its inputs fit in L2 (always for a verify batch or
 * a short prompt), each row group reads its weights from start to end, so the DRAM
 * streams stay long; otherwise column blocks go outermost so that one block's inputs
 * stay in L2 while every row passes over them. Only the order of the work changes, not
 * the order of any reduction. */
static bool rows_outer(int64_t n_tok, int64_t cols)
{
    return n_tok * cols * (int64_t)sizeof(x_elem) <= 256 * 1024;
}

/* A block of rows [r, min(r + TR, re)) x tokens [tb, te) over column block k; the block
 * visited next starts at row nr, column nk (prefetched only when it lies inside rows
 * [rb, re) and the matrix). */
static void bf16_block(const sp_mm_job *j, int64_t r, int64_t re, int64_t tb, int64_t te, int64_t k,
                       int64_t nr, int64_t nk)
{
    const sp_weight *w = j->w;
    const int64_t n = w->cols, ke = k + KC < n ? k + KC : n;
    if (r + TR <= re) {
        /* the next block's full KC columns of TR rows exist (else no prefetch) */
        bool pf_ok = nr + TR <= re && nk + (ke - k) <= n;
        dot_rows4(j, sp_weight_row(w, r) + 2 * k, w->row_bytes, r, tb, te, k, ke,
                  pf_ok ? sp_weight_row(w, nr) + 2 * nk : NULL);
        return;
    }
    for (; r < re; r++)
        for (int64_t t = tb; t < te; t++)
            dot_1x1(j, sp_weight_row(w, r) + 2 * k, w->row_bytes, r, t, k, ke, NULL);
}

/* Tokens per block for n_tok tokens: as few blocks of at most TB as can hold them, of
 * nearly equal size in whole tiles (each block streams the weights once: 128 tokens as
 * 126 + 2 read them twice, the second time for two tokens). */
static int64_t block_tokens(int64_t n_tok)
{
    int64_t blocks = (n_tok + TB - 1) / TB;
    int64_t per = (n_tok + blocks - 1) / blocks;
    return (per + TT - 1) / TT * TT;
}

/* Rows [rb, re) x all tokens in blocks of block_tokens, TR rows and KC columns: rows outermost
 * when a token block's inputs fit in L2 (rows_outer), else columns outermost. Only the
 * visiting order of blocks changes; each output's accumulation order is the block's own. */
static void walk_blocks(const sp_mm_job *j, int64_t rb, int64_t re)
{
    const int64_t n = j->w->cols, n_tok = j->n_tok;
    const int64_t bt = block_tokens(n_tok);
    for (int64_t tb = 0; tb < n_tok; tb += bt) {
        int64_t te = tb + bt < n_tok ? tb + bt : n_tok;
        if (rows_outer(te - tb, n)) {
            for (int64_t r = rb; r < re; r += TR)
                for (int64_t k = 0; k < n; k += KC) {
                    bool last_k = k + KC >= n;
                    bf16_block(j, r, re, tb, te, k, last_k ? r + TR : r, last_k ? 0 : k + KC);
                }
        } else {
            for (int64_t k = 0; k < n; k += KC)
                for (int64_t r = rb; r < re; r += TR) {
                    bool last_r = r + TR >= re;
                    bf16_block(j, r, re, tb, te, k, last_r ? rb : r + TR, last_r ? k + KC : k);
                }
        }
    }
}

static void rows_bf16_dp(const sp_mm_job *j, int64_t rb, int64_t re)
{
    const sp_weight *w = j->w;
    const int64_t n = w->cols, n_tok = j->n_tok;
    const size_t ws = w->row_bytes;
    if (n_tok <= 3) { /* decode and the smallest verify batches: DR weight streams */
        static const dot_fn dot_8xT[4] = {NULL, dot_8x1, dot_8x2, dot_8x3};
        int64_t r = rb;
        for (; r + DR <= re; r += DR)
            for (int64_t k = 0; k < n; k += KC) {
                int64_t ke = k + KC < n ? k + KC : n;
                /* the next block: the next column block of these rows, else the next rows;
                 * the range's last block prefetches itself (nothing ahead) */
                int64_t nr = ke < n ? r : r + DR, nk = ke < n ? ke : 0;
                if (nr + DR > re)
                    nr = r, nk = k;
                dot_8xT[n_tok](j, sp_weight_row(w, r) + 2 * k, ws, r, 0, k, ke, sp_weight_row(w, nr) + 2 * nk);
            }
        for (; r < re; r++)
            for (int64_t k = 0; k < n; k += KC)
                for (int64_t t = 0; t < n_tok; t++)
                    dot_1x1(j, sp_weight_row(w, r) + 2 * k, ws, r, t, k, k + KC < n ? k + KC : n, NULL);
        return;
    }
    walk_blocks(j, rb, re);
}

/* ---- input ------------------------------------------------------------------------------ */

/* sp_mm_round_bf16 on 16 lanes: round to nearest even, NaN quieted (not vcvtneps2bf16,
 * which would flush denormal inputs to zero where the reference keeps them). */
static void prep_bf16(const float *x, int64_t n, void *out)
{
    uint16_t *o = out;
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512((const void *)(x + i));
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(half, odd)), 16);
        r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        _mm256_storeu_si256((__m256i *)(void *)(o + i), _mm512_cvtepi32_epi16(r));
    }
    for (; i < n; i++)
        o[i] = sp_mm_round_bf16(x[i]);
}

#if SP_BF16_DOT_FMA
/* SP_MM_PREP_BF16_SPLIT: each 32 values (n a multiple of 32) rounded as prep_bf16 does,
 * widened to fp32, the 16 even columns' then the 16 odd ones'. */
static void prep_bf16_split(const float *x, int64_t n, void *out)
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    float *o = out;
    for (int64_t i = 0; i < n; i += 32) {
        _Alignas(64) uint16_t h[32];
        prep_bf16(x + i, 32, h);
        __m512i a = _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)(const void *)h));
        __m512i b = _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)(const void *)(h + 16)));
        _mm512_storeu_si512((void *)(o + i), _mm512_slli_epi32(_mm512_permutex2var_epi32(a, ev, b), 16));
        _mm512_storeu_si512((void *)(o + i + 16), _mm512_slli_epi32(_mm512_permutex2var_epi32(a, od, b), 16));
    }
}
#define PREP_FN prep_bf16_split
#else
#define PREP_FN prep_bf16

/* vdpbf16ps against its emulation by two FMAs (dot_tile): true when the FMAs take at most
 * 3/4 of the instruction's time on this core. Sixteen independent chains of 1024 each, the
 * best of 5 runs of both; a few tens of microseconds, once. */
static __attribute__((noinline)) double time_dot(bool fma)
{
    __m512 a[16];
    for (int i = 0; i < 16; i++)
        a[i] = _mm512_setzero_ps();
    __m512i v = _mm512_set1_epi32(0x3f803f80);
    __asm__ volatile("" : "+v"(v));
    const __m512 vf = _mm512_castsi512_ps(v);
    double t0 = sp_now_ms();
    for (int n = 0; n < 1024; n++)
        for (int i = 0; i < 16; i++)
            a[i] = fma ? _mm512_fmadd_ps(vf, vf, _mm512_fmadd_ps(vf, vf, a[i]))
                       : _mm512_dpbf16_ps(a[i], (__m512bh)v, (__m512bh)v);
    double t = sp_now_ms() - t0;
    for (int i = 0; i < 16; i++)
        __asm__ volatile("" ::"v"(a[i]));
    return t;
}

bool sp_mm_vdpbf16ps_is_slow(void)
{
    double dp = 1e9, fma = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double a = time_dot(false), b = time_dot(true);
        dp = a < dp ? a : dp;
        fma = b < fma ? b : fma;
    }
    return fma <= 0.75 * dp;
}
#endif

sp_mm_kernel PICK(const sp_weight *w)
{
    if (w->cols % 32 == 0) {
        if (w->format == SP_WF_BF16)
            return (sp_mm_kernel){rows_bf16_dp, PREP, KERNEL_NAME("bf16"), PREP_FN};
        if (w->format == SP_WF_MXFP4)
            return sp_mm_pick_avx512vnni_q8();
    }
    return sp_mm_pick_avx512(w);
}
