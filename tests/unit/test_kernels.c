/* test_kernels.c: every CPU kernel against its scalar reference on random inputs, and
 * the exact decoders against known values. Tolerances: fp32 accumulation against a
 * double reference, relative L2 <= 1e-5. Also checks that a matmul row is bit-identical
 * whatever else is in the batch. */
#include "test_util.h"
#include "test_weight_layout.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/topk_torch.h"
#include "model/rope.h"
#include "util/dtype.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


static void *make_weight(sp_wformat f, int64_t rows, int64_t cols, sp_weight *w)
{
    size_t esz = f == SP_WF_F32 ? 4 : 2;
    unsigned char *d = malloc((size_t)(rows * cols) * esz);
    for (int64_t i = 0; i < rows * cols; i++) {
        float v = test_frand();
        if (f == SP_WF_F32)
            memcpy(d + 4 * i, &v, 4);
        else {
            uint16_t h = f == SP_WF_BF16 ? sp_f32_to_bf16(v) : sp_f32_to_f16(v);
            memcpy(d + 2 * i, &h, 2);
        }
    }
    memset(w, 0, sizeof *w);
    w->format = f;
    w->rows = rows;
    w->cols = cols;
    w->data = d;
    w->row_bytes = (size_t)cols * esz;
    w->global_scale = 1.0f;
    return d;
}

static void test_matmul_vs_reference(void **state)
{
    (void)state;
    sp_pool *pool;
    assert_int_equal(sp_pool_new(3, &pool, NULL), SP_OK);
    sp_wformat fmts[] = {SP_WF_F32, SP_WF_BF16, SP_WF_F16};
    int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 3}, {64, 64, 1}, {33, 100, 5}, {130, 257, 9},
                           {16, 8, 33}};
    for (size_t fi = 0; fi < 3; fi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int64_t rows = shapes[si][0], cols = shapes[si][1], nt = shapes[si][2];
            sp_weight w;
            void *d = make_weight(fmts[fi], rows, cols, &w);
            float *x = malloc((size_t)(nt * cols) * sizeof(float));
            float *b = malloc((size_t)rows * sizeof(float));
            float *y = malloc((size_t)(nt * rows) * sizeof(float));
            float *yr = malloc((size_t)(nt * rows) * sizeof(float));
            for (int64_t i = 0; i < nt * cols; i++)
                x[i] = test_frand();
            for (int64_t i = 0; i < rows; i++)
                b[i] = test_frand();
            sp_matmul(pool, &w, x, nt, y, b);
            sp_matmul_ref(&w, x, nt, yr, b);
            double e = rel_l2(y, yr, (size_t)(nt * rows));
            if (e > 1e-5)
                fail_msg("%s %lldx%lld n=%lld: relL2 %.3g", sp_wformat_name(fmts[fi]),
                         (long long)rows, (long long)cols, (long long)nt, e);
            /* each token alone gives the same bits as inside the batch */
            float *y1 = malloc((size_t)rows * sizeof(float));
            for (int64_t t = 0; t < nt; t++) {
                sp_matmul(NULL, &w, x + t * cols, 1, y1, b);
                assert_memory_equal(y1, y + t * rows, (size_t)rows * sizeof(float));
            }
            free(y1);
            free(d);
            free(x);
            free(b);
            free(y);
            free(yr);
        }
    sp_pool_free(pool);
}

/* A random weight in any format; FP4/FP8 codes random bytes (no FP8 NaN), scales in a
 * moderate range. Returns the buffers to free. */
static void make_any_weight(sp_wformat f, int64_t rows, int64_t cols, sp_weight *w, void **data,
                            void **scales)
{
    *scales = NULL;
    if (f == SP_WF_F32 || f == SP_WF_BF16 || f == SP_WF_F16) {
        *data = make_weight(f, rows, cols, w);
        return;
    }
    size_t sbytes = test_weight_layout(w, f, rows, cols);
    w->global_scale = f == SP_WF_NVFP4 ? 0.37f : 1.0f;
    size_t rb = w->row_bytes;
    unsigned char *d = malloc(rb * (size_t)rows);
    for (size_t i = 0; i < rb * (size_t)rows; i++) {
        d[i] = (unsigned char)(rand() & 255);
        if (f == SP_WF_FP8_BLOCK && (d[i] & 0x7f) == 0x7f)
            d[i] = 0x3c;
    }
    w->data = d;
    if (f == SP_WF_FP8_BLOCK) {
        float *sc = malloc(sbytes);
        for (size_t i = 0; i < sbytes / sizeof(float); i++)
            sc[i] = 0.01f * (float)(1 + i % 7);
        w->scales = (const unsigned char *)sc;
        *scales = sc;
    } else {
        unsigned char *sc = malloc(sbytes);
        for (size_t i = 0; i < sbytes; i++)
            sc[i] = f == SP_WF_MXFP4 ? (unsigned char)(118 + rand() % 12) : (unsigned char)(40 + rand() % 60);
        w->scales = sc;
        *scales = sc;
    }
    *data = d;
}

/* Every ISA level this machine has x both precisions x every format, against the
 * scalar reference of that precision (relative L2 <= 1e-5: fp32 accumulation against
 * double), and every token computed alone bit-identical to the same token inside
 * batches of every size (the tile shapes differ, the bits must not). */
static void test_matmul_every_isa(void **state)
{
    (void)state;
    sp_pool *pool;
    assert_int_equal(sp_pool_new(2, &pool, NULL), SP_OK);
    sp_isa best = sp_isa_detected();
    sp_wformat fmts[] = {SP_WF_F32, SP_WF_BF16, SP_WF_F16, SP_WF_MXFP4, SP_WF_NVFP4, SP_WF_FP8_BLOCK};
    /* 2080 columns: a full column block and a short one (fast kernels block by 2048, the
     * AVX2 BF16 prefill tiles take spans of 2048), 50 rows: two and a part row blocks of 24;
     * 140 tokens: two token blocks (fast kernels block by 126) and a partial input tile
     * (tiles of 6), whose sub-batches below start at every tile offset */
    int64_t shapes[][3] = {{37, 64, 1}, {64, 96, 13}, {130, 256, 9}, {9, 2048, 7}, {40, 160, 66},
                           {50, 2080, 140}};
    /* the avx512bf16 level once with vdpbf16ps and once with its emulation by FMAs */
    for (int isa = SP_ISA_GENERIC, dot = 0; isa <= (int)best; isa += isa < SP_ISA_AVX512_BF16 || dot++) {
        assert_int_equal(sp_isa_set((sp_isa)isa), isa);
        sp_matmul_set_bf16_dot(dot ? SP_BF16_DOT_FMA : SP_BF16_DOT_VDPBF16PS);
        for (int prec = 0; prec < 2; prec++)
            for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++)
                for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                    int64_t rows = shapes[si][0], cols = shapes[si][1], nt = shapes[si][2];
                    sp_weight w;
                    void *d, *sc;
                    make_any_weight(fmts[fi], rows, cols, &w, &d, &sc);
                    float *x = malloc((size_t)(nt * cols) * sizeof(float));
                    float *b = malloc((size_t)rows * sizeof(float));
                    float *y = malloc((size_t)(nt * rows) * sizeof(float));
                    float *yr = malloc((size_t)(nt * rows) * sizeof(float));
                    float *y1 = malloc((size_t)(nt * rows) * sizeof(float));
                    for (int64_t i = 0; i < nt * cols; i++)
                        x[i] = test_frand();
                    for (int64_t i = 0; i < rows; i++)
                        b[i] = test_frand();
                    sp_matmul_prec(pool, (sp_precision)prec, &w, x, nt, y, b);
                    /* FAST equals EXACT where the CPU has no bf16 dot product, but for
                     * MXFP4 at AVX2 (8-bit inputs) */
                    bool dp = prec == SP_PRECISION_FAST && isa == SP_ISA_AVX512_BF16 &&
                              strstr(sp_matmul_kernel_name(&w, SP_PRECISION_FAST), "dot");
                    bool q8 = prec == SP_PRECISION_FAST &&
                              strstr(sp_matmul_kernel_name(&w, SP_PRECISION_FAST), "q8");
                    if (q8)
                        sp_matmul_ref_q8(&w, x, nt, yr, b);
                    else
                        sp_matmul_ref_prec(dp ? SP_PRECISION_FAST : SP_PRECISION_EXACT, &w, x, nt, yr, b);
                    double e = rel_l2(y, yr, (size_t)(nt * rows));
                    if (e > 1e-5)
                        fail_msg("%s %s %s %lldx%lld n=%lld: relL2 %.3g", sp_isa_name((sp_isa)isa),
                                 prec ? "fast" : "exact", sp_wformat_name(fmts[fi]), (long long)rows,
                                 (long long)cols, (long long)nt, e);
                    /* alone, and in every sub-batch [t0, nt) */
                    for (int64_t t0 = 0; t0 < nt; t0 += (nt > 8 ? 5 : 1)) {
                        sp_matmul_prec(t0 % 2 ? NULL : pool, (sp_precision)prec, &w, x + t0 * cols,
                                       nt - t0, y1, b);
                        if (memcmp(y1, y + t0 * rows, (size_t)((nt - t0) * rows) * sizeof(float)))
                            fail_msg("%s %s %s %lldx%lld: batch [%lld, %lld) differs", sp_isa_name((sp_isa)isa),
                                     prec ? "fast" : "exact", sp_wformat_name(fmts[fi]), (long long)rows,
                                     (long long)cols, (long long)t0, (long long)nt);
                        sp_matmul_prec(pool, (sp_precision)prec, &w, x + t0 * cols, 1, y1, b);
                        assert_memory_equal(y1, y + t0 * rows, (size_t)rows * sizeof(float));
                    }
                    free(d);
                    free(sc);
                    free(x);
                    free(b);
                    free(y);
                    free(yr);
                    free(y1);
                }
    }
    sp_isa_set(best);
    sp_matmul_set_bf16_dot(SP_BF16_DOT_AUTO);
    sp_pool_free(pool);
}

/* The avx512bf16 level's BF16 products with vdpbf16ps and with two FMAs a lane (DAZ, FTZ)
 * give the same bits: weights and inputs over every exponent, denormal and zero ones
 * among them (the instruction reads them as zero), sums that would end denormal, two
 * column blocks, every tile shape, with threads, and SP_BF16_DOT_FMA_BATCHES (FMAs from
 * four tokens, the instruction below). */
static void test_bf16_fma_equals_vdpbf16ps(void **state)
{
    (void)state;
    if (sp_isa_detected() < SP_ISA_AVX512_BF16)
        skip(); /* no vdpbf16ps here */
    sp_pool *pool;
    assert_int_equal(sp_pool_new(2, &pool, NULL), SP_OK);
    int64_t shapes[][2] = {{37, 64}, {24, 2080}, {130, 256}};
    uint64_t st = 0x2545f4914f6cdd1dull;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1];
        enum { NT = 20 };
        sp_weight w;
        uint16_t *d = make_weight(SP_WF_BF16, rows, cols, &w);
        float *x = malloc((size_t)(NT * cols) * sizeof(float));
        float *ya = malloc((size_t)(NT * rows) * sizeof(float));
        float *yb = malloc((size_t)(NT * rows) * sizeof(float));
        for (int64_t i = 0; i < rows * cols; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            uint16_t h = (uint16_t)(st >> 48);
            if ((h & 0x7f80) == 0x7f80) /* no infinities or NaNs */
                h &= 0xbfff;
            if (i % 3 && i / cols % 4 < 2) /* rows of any exponent, a third ordinary values */
                d[i] = h;
            /* rows of ordinary values (i / cols % 4 == 2), and of 2^60 x 1.x, where denormal
             * inputs make normal products */
            if (i / cols % 4 == 3)
                d[i] = (uint16_t)(0x5d80 | (d[i] & 0x807f));
        }
        for (int64_t i = 0; i < NT * cols; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t u = (uint32_t)(st >> 32);
            if ((u & 0x7f800000u) == 0x7f800000u)
                u &= 0xbfffffffu;
            if (i / cols % 5 == 3) /* tokens of denormals (once rounded to bf16) */
                x[i] = test_frand() * 1e-38f;
            else if (i / cols % 5 == 4) /* tokens of tiny normals: sums may end denormal */
                x[i] = test_frand() * 4e-38f;
            else if (i % 4)
                memcpy(&x[i], &u, 4);
            else
                x[i] = test_frand() * 1e-38f;
        }
        for (int nt = 1; nt <= NT; nt += nt < 8 ? 1 : 6) {
            sp_matmul_set_bf16_dot(SP_BF16_DOT_VDPBF16PS);
            sp_matmul_prec(pool, SP_PRECISION_FAST, &w, x, nt, ya, NULL);
            for (int mode = SP_BF16_DOT_FMA; mode <= SP_BF16_DOT_FMA_BATCHES; mode++) {
                sp_matmul_set_bf16_dot((sp_bf16_dot)mode);
                bool fma = mode == SP_BF16_DOT_FMA || nt >= 4; /* else this compares a kernel with itself */
                assert_int_equal(strstr(sp_matmul_kernel_name_n(&w, SP_PRECISION_FAST, nt), "fma-dot") != NULL, fma);
                sp_matmul_prec(nt % 2 ? pool : NULL, SP_PRECISION_FAST, &w, x, nt, yb, NULL);
                for (int64_t i = 0; i < nt * rows; i++)
                    if (memcmp(&ya[i], &yb[i], 4) && !(isnan(ya[i]) && isnan(yb[i])))
                        fail_msg("%lldx%lld, %d tokens, mode %d: output %lld: vdpbf16ps %a, FMAs %a",
                                 (long long)rows, (long long)cols, nt, mode, (long long)i,
                                 (double)ya[i], (double)yb[i]);
            }
        }
        free(d);
        free(x);
        free(ya);
        free(yb);
    }
    sp_matmul_set_bf16_dot(SP_BF16_DOT_AUTO);
    sp_pool_free(pool);
}

/* The fast precision's MXFP4 products take 8-bit inputs at the avx2 level (vpmaddubsw)
 * and at avx512bf16 (vpdpbusd): the same integer sums and the same fp32 steps after them,
 * so the same bits, for every scale byte, odd block counts (a last block without a
 * partner), every tile shape (1-13 tokens, rows not a multiple of 4) and with threads. */
static void test_fast_mxfp4_avx2_equals_avx512(void **state)
{
    (void)state;
    sp_isa best = sp_isa_detected();
    if (best < SP_ISA_AVX512_BF16)
        skip(); /* one level with 8-bit MXFP4 inputs here: nothing to compare */
    sp_pool *pool;
    assert_int_equal(sp_pool_new(2, &pool, NULL), SP_OK);
    int64_t shapes[][2] = {{37, 96}, {64, 768}, {9, 2080}, {130, 32}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1];
        sp_weight w;
        void *d, *sc;
        make_any_weight(SP_WF_MXFP4, rows, cols, &w, &d, &sc);
        unsigned char *scb = sc;
        for (int64_t i = 0; i < rows * (cols / 32); i++)
            scb[i] = (unsigned char)(i * 37 % 256); /* every scale byte, 0 and 255 too */
        enum { NT = 13 };
        float *x = malloc((size_t)(NT * cols) * sizeof(float));
        float *y2 = malloc((size_t)(NT * rows) * sizeof(float));
        float *y5 = malloc((size_t)(NT * rows) * sizeof(float));
        for (int64_t i = 0; i < NT * cols; i++)
            x[i] = test_frand() * (float)(1 + i % 5) * (i % 7 == 3 ? 1e-3f : 1.0f);
        for (int nt = 1; nt <= NT; nt++) {
            sp_isa_set(SP_ISA_AVX2);
            sp_matmul_prec(pool, SP_PRECISION_FAST, &w, x, nt, y2, NULL);
            sp_isa_set(best);
            /* the vpdpbusd kernel, not the avx2 one again */
            assert_non_null(strstr(sp_matmul_kernel_name(&w, SP_PRECISION_FAST), "avx512vnni"));
            sp_matmul_prec(nt % 2 ? pool : NULL, SP_PRECISION_FAST, &w, x, nt, y5, NULL);
            for (int64_t i = 0; i < nt * rows; i++)
                if (memcmp(&y2[i], &y5[i], sizeof(float)))
                    fail_msg("%lldx%lld, %d tokens: output %lld: avx2 %a, %s %a", (long long)rows,
                             (long long)cols, nt, (long long)i, (double)y2[i],
                             sp_isa_name(best), (double)y5[i]);
        }
        free(d);
        free(sc);
        free(x);
        free(y2);
        free(y5);
    }
    sp_isa_set(best);
    sp_pool_free(pool);
}

/* A matrix kept exact (a MoE router) computes in exact precision inside a fast pass: the
 * same bits as an exact product and the exact kernel's name, at every ISA level, alone and
 * grouped with others; the same matrix not kept exact takes the fast kernel where the level
 * has one (so the test can tell the two apart there). */
static void test_keep_exact(void **state)
{
    (void)state;
    sp_isa best = sp_isa_detected();
    sp_pool *pool;
    assert_int_equal(sp_pool_new(2, &pool, NULL), SP_OK);
    const sp_wformat fmts[] = {SP_WF_BF16, SP_WF_MXFP4};
    enum { NT = 5, ROWS = 32, COLS = 96 };
    float *x = malloc(sizeof(float) * NT * COLS), *ye = malloc(sizeof(float) * NT * ROWS);
    float *yf = malloc(sizeof(float) * NT * ROWS), *yg = malloc(sizeof(float) * NT * ROWS);
    float *yo = malloc(sizeof(float) * NT * ROWS);
    for (int i = 0; i < NT * COLS; i++)
        x[i] = test_frand();
    for (int lv = SP_ISA_GENERIC; lv <= (int)best; lv++) {
        sp_isa_set((sp_isa)lv);
        for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
            sp_weight w, o;
            void *d, *sc, *od, *osc;
            make_any_weight(fmts[fi], ROWS, COLS, &w, &d, &sc);
            make_any_weight(fmts[fi], ROWS, COLS, &o, &od, &osc);
            const char *fast_name = sp_matmul_kernel_name(&w, SP_PRECISION_FAST);
            const char *exact_name = sp_matmul_kernel_name(&w, SP_PRECISION_EXACT);
            w.keep_exact = true;
            assert_string_equal(sp_matmul_kernel_name(&w, SP_PRECISION_FAST), exact_name);
            for (int nt = 1; nt <= NT; nt++) {
                sp_matmul_prec(pool, SP_PRECISION_EXACT, &w, x, nt, ye, NULL);
                sp_matmul_prec(pool, SP_PRECISION_FAST, &w, x, nt, yf, NULL);
                assert_memory_equal(ye, yf, sizeof(float) * (size_t)(nt * ROWS));
                /* grouped with a matrix that is not kept exact: each its own kernel */
                sp_pool_set_precision(pool, SP_PRECISION_FAST);
                const sp_weight *ws[2] = {&w, &o};
                float *ys[2] = {yg, yo};
                const float *bs[2] = {NULL, NULL};
                sp_matmul_multi(pool, 2, ws, x, nt, ys, bs);
                sp_pool_set_precision(pool, SP_PRECISION_EXACT);
                assert_memory_equal(ye, yg, sizeof(float) * (size_t)(nt * ROWS));
                sp_matmul_prec(pool, SP_PRECISION_FAST, &o, x, nt, yf, NULL);
                assert_memory_equal(yo, yf, sizeof(float) * (size_t)(nt * ROWS));
            }
            if (strcmp(fast_name, exact_name)) { /* this level has a fast kernel: it differs */
                w.keep_exact = false;
                sp_matmul_prec(pool, SP_PRECISION_FAST, &w, x, NT, yf, NULL);
                assert_true(memcmp(ye, yf, sizeof(float) * NT * ROWS) != 0);
            }
            free(d);
            free(sc);
            free(od);
            free(osc);
        }
    }
    sp_isa_set(best);
    free(x);
    free(ye);
    free(yf);
    free(yg);
    free(yo);
    sp_pool_free(pool);
}

/* sp_matmul_multi, sp_matmul_each and sp_matmul_swiglu (inputs prepared once, one
 * parallel-for) give the bits of the separate products and sp_swiglu, at every level, in both precisions,
 * with mixed formats (which fall back to separate products) and sizes that are not
 * multiples of the 16-row grain. */
static void test_matmul_grouped(void **state)
{
    (void)state;
    sp_pool *pool;
    assert_int_equal(sp_pool_new(2, &pool, NULL), SP_OK);
    sp_isa best = sp_isa_detected();
    const int64_t cols = 96, rows[3] = {200, 37, 64};
    sp_wformat fmts[2][3] = {{SP_WF_BF16, SP_WF_BF16, SP_WF_BF16}, {SP_WF_BF16, SP_WF_F32, SP_WF_MXFP4}};
    for (int isa = SP_ISA_GENERIC; isa <= (int)best; isa++) {
        assert_int_equal(sp_isa_set((sp_isa)isa), isa);
        for (int prec = 0; prec < 2; prec++)
            for (int fi = 0; fi < 2; fi++)
                for (int64_t nt = 1; nt <= 70; nt += 23) {
                    sp_pool_set_precision(pool, (sp_precision)prec);
                    sp_weight w[3];
                    void *d[3], *sc[3];
                    float *y[3], *ya[3], *b[3];
                    float *x = malloc((size_t)(nt * cols) * sizeof(float));
                    for (int64_t i = 0; i < nt * cols; i++)
                        x[i] = test_frand();
                    for (int i = 0; i < 3; i++) {
                        make_any_weight(fmts[fi][i], rows[i], cols, &w[i], &d[i], &sc[i]);
                        y[i] = malloc((size_t)(nt * rows[i]) * sizeof(float));
                        ya[i] = malloc((size_t)(nt * rows[i]) * sizeof(float));
                        b[i] = malloc((size_t)rows[i] * sizeof(float));
                        for (int64_t r = 0; r < rows[i]; r++)
                            b[i][r] = test_frand();
                        sp_matmul(pool, &w[i], x, nt, ya[i], b[i]);
                    }
                    const sp_weight *ws[3] = {&w[0], &w[1], &w[2]};
                    const float *bs[3] = {b[0], b[1], b[2]};
                    sp_matmul_multi(pool, 3, ws, x, nt, y, bs);
                    for (int i = 0; i < 3; i++)
                        assert_memory_equal(y[i], ya[i], (size_t)(nt * rows[i]) * sizeof(float));
                    /* sp_matmul_each: own inputs (other rows of x), own token counts */
                    const int64_t ns[3] = {nt, nt > 5 ? nt - 5 : 1, 1};
                    const float *xs[3] = {x, x + (nt - ns[1]) * cols, x + (nt - 1) * cols};
                    for (int i = 0; i < 3; i++)
                        sp_matmul(pool, &w[i], xs[i], ns[i], ya[i], b[i]);
                    sp_matmul_each(pool, 3, ws, xs, ns, y, bs);
                    for (int i = 0; i < 3; i++)
                        assert_memory_equal(y[i], ya[i], (size_t)(ns[i] * rows[i]) * sizeof(float));
                    /* gate w[0] and an up projection of its shape, in the set's last format */
                    sp_weight wu_;
                    void *ud, *usc;
                    make_any_weight(fmts[fi][2], rows[0], cols, &wu_, &ud, &usc);
                    const sp_weight *wu = &wu_;
                    size_t n0 = (size_t)(nt * rows[0]);
                    float *ga = malloc(n0 * sizeof(float)), *ua = malloc(n0 * sizeof(float));
                    float *up = malloc(n0 * sizeof(float));
                    sp_matmul(pool, &w[0], x, nt, ga, NULL);
                    sp_matmul(pool, wu, x, nt, ua, NULL);
                    sp_swiglu(ga, ua, nt * rows[0], ga);
                    sp_matmul_swiglu(pool, &w[0], wu, x, nt, y[0], up);
                    assert_memory_equal(y[0], ga, n0 * sizeof(float));
                    assert_memory_equal(up, ua, n0 * sizeof(float));
                    free(ga);
                    free(ua);
                    free(up);
                    free(ud);
                    free(usc);
                    for (int i = 0; i < 3; i++) {
                        free(d[i]);
                        free(sc[i]);
                        free(y[i]);
                        free(ya[i]);
                        free(b[i]);
                    }
                    free(x);
                }
    }
    sp_isa_set(best);
    sp_pool_set_precision(pool, SP_PRECISION_EXACT);
    sp_pool_free(pool);
}

/* A kernel's vectorized input preparation gives sp_mm_round_bf16's bits: ties to even,
 * NaN quieted, infinities, signed zeros, denormals, random bit patterns. */
static void check_bf16_input_rounding(void);

/* The vectorized bf16 rounding of the inputs (each way the avx512bf16 kernels take them:
 * bf16 for vdpbf16ps, widened and split for FMAs) equals the scalar one bit for bit. */
static void test_bf16_input_rounding(void **state)
{
    (void)state;
    sp_weight w = {.format = SP_WF_BF16, .rows = 1, .cols = 32};
    if (!strstr(sp_matmul_kernel_name(&w, SP_PRECISION_FAST), "dot"))
        skip(); /* no bf16 dot-product kernels here: the scalar rounding is the reference */
    sp_matmul_set_bf16_dot(SP_BF16_DOT_VDPBF16PS);
    check_bf16_input_rounding();
    sp_matmul_set_bf16_dot(SP_BF16_DOT_FMA);
    check_bf16_input_rounding();
    sp_matmul_set_bf16_dot(SP_BF16_DOT_AUTO);
}

static void check_bf16_input_rounding(void)
{
    sp_weight w = {.format = SP_WF_BF16, .rows = 1, .cols = 32};
    enum { N = 4096 + 7 };
    static float x[N];
    static uint16_t got[N];
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f800000u,
                                0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x80000000u,
                                0x00000000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x7f7f8000u};
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N; i++) {
        uint32_t u;
        if (i < (int)(sizeof special / sizeof special[0]))
            u = special[i];
        else {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            u = (uint32_t)(st >> 32);
        }
        memcpy(&x[i], &u, 4);
    }
    sp_matmul_round_input(&w, x, N, got);
    for (int i = 0; i < N; i++)
        if (got[i] != sp_mm_round_bf16(x[i])) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            fail_msg("value %d (bits %08x): %04x, reference %04x", i, (unsigned)u, got[i],
                     sp_mm_round_bf16(x[i]));
        }
}

/* A kernel's vectorized 8-bit quantization of its inputs gives sp_mm_prep_q8_row's bits:
 * blocks of zeros, of tiny values (below 2^-120), with an infinity or a NaN, with ties
 * (x * 127 / amax halfway between integers), and random ones. */
static void test_q8_input_rounding(void **state)
{
    (void)state;
    enum { COLS = 32 * 64 };
    static float x[COLS];
    static unsigned char got[SP_MM_Q8_BYTES(COLS)], ref[SP_MM_Q8_BYTES(COLS)];
    sp_isa best = sp_isa_detected();
    if (best < SP_ISA_AVX2)
        skip(); /* no vector quantizer on this CPU: the scalar one is the reference */
    sp_isa_set(SP_ISA_AVX2); /* the level whose fast MXFP4 products take 8-bit inputs */
    assert_true(sp_matmul_prep_q8(x, COLS, got));
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (int b = 0; b < COLS / 32; b++)
        for (int i = 0; i < 32; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            float r = (float)((double)(st >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
            float *v = &x[32 * b + i];
            switch (b % 8) {
            case 0: *v = 0.0f; break;                                    /* all zero */
            case 1: *v = r * 1e-37f; break;                              /* tiny */
            case 2: *v = i == 5 ? INFINITY : r; break;                   /* an infinity */
            case 3: *v = i == 9 ? NAN : r; break;                        /* a NaN */
            case 4: *v = i == 0 ? 127.0f : (float)(i - 16) + 0.5f; break; /* ties */
            case 5: *v = i == 31 ? -3e38f : r * 1e38f; break;            /* huge */
            default: *v = r * (float)(b + 1); break;
            }
        }
    assert_true(sp_matmul_prep_q8(x, COLS, got));
    sp_isa_set(best);
    sp_mm_prep_q8_row(x, COLS, ref);
    for (size_t i = 0; i < sizeof got; i++)
        if (got[i] != ref[i])
            fail_msg("byte %zu (blocks %zu and %zu): %02x, reference %02x", i, 2 * (i / 96),
                     2 * (i / 96) + 1, got[i], ref[i]);
}

/* The value an 8-bit-input kernel gives for a one-hot input of 1 at the weight's column:
 * q = 127, d = 1 / 127, then (127 v) x (scale / 2 x d) with v = 2 x E2M1. */
static float q8_one_hot(const sp_weight *w, int64_t c)
{
    const unsigned char *row = sp_weight_row(w, 0);
    int code = c % 2 ? row[c / 2] >> 4 : row[c / 2] & 15;
    float d = 1.0f / 127.0f, sc = sp_e8m0_to_f32(w->scales[c / 32]);
    float v = 2.0f * sp_e2m1_table[code];
    return (127.0f * v) * ((sc * 0.5f) * d);
}

/* MXFP4 in the fast kernels of the active level: every code times every scale whose
 * products are normal numbers (2^-126 .. 6 * 2^125) comes out exact (one-hot inputs pick
 * single weights); the 8-bit-input kernels give exactly q8_one_hot's value. */
static void check_fast_scales(const sp_weight *w, unsigned char *scale, const float *x)
{
    bool q8 = strstr(sp_matmul_kernel_name(w, SP_PRECISION_FAST), "q8") != NULL;
    float y[32];
    for (int s = 2; s <= 252; s++) {
        *scale = (unsigned char)s; /* w's one block scale */
        for (int n = 1; n <= 32; n += 31) /* one token (registers) and 32 (decoded buffer) */
            for (int t0 = 0; t0 + n <= 32; t0 += n) {
                sp_matmul_prec(NULL, SP_PRECISION_FAST, w, x + t0 * 32, n, y, NULL);
                for (int t = 0; t < n; t++) {
                    float want = q8 ? q8_one_hot(w, t0 + t) : sp_weight_at(w, 0, t0 + t);
                    if (y[t] != want)
                        fail_msg("%s: scale %d column %d: %g, reference %g",
                                 sp_isa_name(sp_isa_active()), s, t0 + t, y[t], want);
                }
            }
    }
}

/* check_fast_scales at every level the CPU has. */
static void test_mxfp4_fast_scales(void **state)
{
    (void)state;
    unsigned char codes[16], sc[1];
    for (int i = 0; i < 16; i++)
        codes[i] = (unsigned char)((2 * i) % 16 | ((2 * i + 1) % 16) << 4);
    sp_weight w = {.format = SP_WF_MXFP4, .rows = 1, .cols = 32, .data = codes, .row_bytes = 16,
                   .scales = sc, .scale_row_bytes = 1, .global_scale = 1.0f};
    float x[32 * 32] = {0};
    for (int t = 0; t < 32; t++)
        x[t * 32 + t] = 1.0f;
    sp_isa best = sp_isa_detected();
    for (int isa = SP_ISA_GENERIC; isa <= (int)best; isa++) {
        assert_int_equal(sp_isa_set((sp_isa)isa), isa);
        check_fast_scales(&w, sc, x);
    }
    sp_isa_set(best);
}

/* SwiGLU at every level against silu in double: within 4 ulp-sized steps (2^-21
 * relative; the polynomial exp is within ~2 ulp of expf), the edge values as expf gives
 * them (+-0, +-inf, NaN, arguments whose e^-g overflows or vanishes), and an element's
 * bits independent of where it sits in a call and of the call's length (the tail goes
 * through the same lanes). */
static void test_swiglu_levels(void **state)
{
    (void)state;
    enum { N = 77 };
    float g[N], u[N], y[N], y1[N];
    for (int i = 0; i < N; i++) {
        g[i] = (test_frand() - 0.5f) * 40.0f;
        u[i] = test_frand() - 0.5f;
    }
    const float edge[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.0f, -88.0f, 95.0f, -95.0f,
                          104.0f, -104.0f, 200.0f, -200.0f, 1e-30f, -1e-30f, 3e38f, -3e38f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        g[i] = edge[i];
        u[i] = 1.0f;
    }
    sp_isa best = sp_isa_detected();
    for (int isa = SP_ISA_GENERIC; isa <= (int)best; isa++) {
        assert_int_equal(sp_isa_set((sp_isa)isa), isa);
        sp_swiglu(g, u, N, y);
        for (int i = 0; i < N; i++) {
            double s = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            float sf = (float)s;
            if (isnan(sf) != isnan(y[i]) || (isinf(sf) && sf != y[i]))
                fail_msg("%s: swiglu(%g) = %g, expected %g", sp_isa_name((sp_isa)isa), (double)g[i],
                         (double)y[i], (double)sf);
            if (isfinite(sf) && fabs(y[i] - s) > ldexp(fabs(s), -21) + 2e-38) /* FLT_MIN: e^-g overflows */
                fail_msg("%s: swiglu(%g) = %.9g, expected %.9g", sp_isa_name((sp_isa)isa),
                         (double)g[i], (double)y[i], s);
        }
        for (int off = 0; off < 9; off++)
            for (int n = 1; off + n <= N; n += 5) {
                sp_swiglu(g + off, u + off, n, y1);
                if (memcmp(y1, y + off, (size_t)n * sizeof(float)))
                    fail_msg("%s: swiglu of [%d, %d) differs from the whole call",
                             sp_isa_name((sp_isa)isa), off, off + n);
            }
    }
    sp_isa_set(best);
}

static void test_rmsnorm_vs_reference(void **state)
{
    (void)state;
    int64_t dims[] = {1, 7, 64, 129};
    for (size_t i = 0; i < 4; i++) {
        int64_t d = dims[i], rows = 3;
        float *x = malloc((size_t)(rows * d) * 4), *w = malloc((size_t)d * 4);
        float *y = malloc((size_t)(rows * d) * 4), *yr = malloc((size_t)(rows * d) * 4);
        for (int64_t j = 0; j < rows * d; j++)
            x[j] = test_frand() * 10;
        for (int64_t j = 0; j < d; j++)
            w[j] = test_frand();
        sp_rmsnorm(x, w, rows, d, 1e-5f, y);
        sp_rmsnorm_ref(x, w, rows, d, 1e-5f, yr);
        assert_true(rel_l2(y, yr, (size_t)(rows * d)) < 1e-6);
        free(x);
        free(w);
        free(y);
        free(yr);
    }
}

static void test_attention_vs_reference(void **state)
{
    (void)state;
    sp_pool *pool;
    assert_int_equal(sp_pool_new(2, &pool, NULL), SP_OK);
    struct {
        int64_t heads, kv, qk, v, pos0, n, window;
        bool sinks;
    } cases[] = {
        {4, 4, 16, 16, 0, 5, 0, false}, {8, 2, 12, 12, 3, 4, 0, false},
        {4, 1, 24, 8, 10, 6, 4, false}, {4, 2, 16, 16, 0, 9, 3, true},
        {2, 2, 8, 8, 0, 1, 0, true}, {8, 2, 64, 64, 150, 40, 0, true}, /* threaded */
        {4, 2, 64, 64, 0, 40, 0, false}, {4, 4, 128, 128, 20, 30, 0, true},
        {2, 1, 32, 48, 5, 20, 7, false}, {2, 1, 64, 64, 3, 50, 33, true},
    };
    /* every kernel level the machine has (portable, AVX2, AVX-512) */
    sp_isa best = sp_isa_detected();
    for (int isa = SP_ISA_GENERIC; isa <= (int)best && isa <= SP_ISA_AVX512; isa++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sp_isa_set((sp_isa)isa);
        int64_t H = cases[c].heads, KV = cases[c].kv, qk = cases[c].qk, vd = cases[c].v;
        int64_t ctx = cases[c].pos0 + cases[c].n;
        float *q = malloc((size_t)(cases[c].n * H * qk) * 4);
        float *k = malloc((size_t)(ctx * KV * qk) * 4), *v = malloc((size_t)(ctx * KV * vd) * 4);
        float *o = malloc((size_t)(cases[c].n * H * vd) * 4), *orf = malloc((size_t)(cases[c].n * H * vd) * 4);
        float *scr = malloc((size_t)(2 * SP_ATTN_GROUP * ctx) * 4), sinks[16];
        for (int64_t i = 0; i < cases[c].n * H * qk; i++)
            q[i] = test_frand();
        for (int64_t i = 0; i < ctx * KV * qk; i++)
            k[i] = test_frand();
        for (int64_t i = 0; i < ctx * KV * vd; i++)
            v[i] = test_frand();
        for (int i = 0; i < 16; i++)
            sinks[i] = test_frand() * 2;
        sp_attn_args a = {.q = q, .q_stride = H * qk, .k_cache = k, .v_cache = v, .n_heads = H,
                          .n_kv_heads = KV, .qk_dim = qk, .v_dim = vd, .pos0 = cases[c].pos0,
                          .n_tok = cases[c].n, .window = cases[c].window, .scale = 0.3f,
                          .sinks = cases[c].sinks ? sinks : NULL, .out = o, .scratch = scr,
                          .n_ctx = ctx};
        sp_attention(pool, &a);
        a.out = orf;
        sp_attention_ref(&a);
        double e = rel_l2(o, orf, (size_t)(cases[c].n * H * vd));
        if (e > 1e-5)
            fail_msg("attention case %zu (%s): relL2 %.3g", c, sp_isa_name((sp_isa)isa), e);
        /* each query alone gives the bits it got in the batch */
        for (int64_t t = 0; t < cases[c].n; t++) {
            sp_attn_args one = a;
            one.q = q + t * H * qk;
            one.pos0 = cases[c].pos0 + t;
            one.n_tok = 1;
            one.out = orf;
            sp_attention(t % 2 ? pool : NULL, &one);
            if (memcmp(orf, o + t * H * vd, (size_t)(H * vd) * sizeof(float)))
                fail_msg("attention case %zu (%s): query %lld alone differs", c,
                         sp_isa_name((sp_isa)isa), (long long)t);
        }
        free(q);
        free(k);
        free(v);
        free(o);
        free(orf);
        free(scr);
    }
    sp_isa_set(best);
    sp_pool_free(pool);
}

/* sp_attention_many: several attentions (different caches, lengths, token counts,
 * windows) in one parallel-for give every row bit for bit what sp_attention gives it
 * alone, with the rows of one attention split between threads and threads crossing from
 * one attention to the next. */
static void test_attention_many(void **state)
{
    (void)state;
    enum { N = 5, H = 8, KV = 2, D = 32 };
    sp_pool *pool;
    assert_int_equal(sp_pool_new(2, &pool, NULL), SP_OK);
    const int64_t pos0[N] = {90, 0, 37, 120, 5}, n_tok[N] = {1, 7, 1, 3, 2},
                  window[N] = {0, 0, 16, 0, 4};
    int64_t max_ctx = 0;
    sp_attn_args a[N];
    float *buf[N][5];
    for (int i = 0; i < N; i++) {
        int64_t ctx = pos0[i] + n_tok[i];
        max_ctx = ctx > max_ctx ? ctx : max_ctx;
        size_t sz[5] = {(size_t)(n_tok[i] * H * D), (size_t)(ctx * KV * D), (size_t)(ctx * KV * D),
                        (size_t)(n_tok[i] * H * D), (size_t)(n_tok[i] * H * D)};
        for (int b = 0; b < 5; b++) {
            buf[i][b] = malloc(sz[b] * sizeof(float));
            for (size_t j = 0; j < sz[b]; j++)
                buf[i][b][j] = test_frand();
        }
        a[i] = (sp_attn_args){.q = buf[i][0], .q_stride = H * D, .k_cache = buf[i][1],
                              .v_cache = buf[i][2], .n_heads = H, .n_kv_heads = KV, .qk_dim = D,
                              .v_dim = D, .pos0 = pos0[i], .n_tok = n_tok[i],
                              .window = window[i], .scale = 0.2f, .out = buf[i][3]};
    }
    float *scr = malloc((size_t)(2 * SP_ATTN_GROUP * max_ctx) * sizeof(float));
    for (int i = 0; i < N; i++) { /* each alone, into buf[i][4] */
        sp_attn_args one = a[i];
        one.out = buf[i][4];
        one.scratch = scr;
        one.n_ctx = max_ctx;
        sp_attention(pool, &one);
    }
    a[0].scratch = scr;
    a[0].n_ctx = max_ctx;
    int64_t start[N + 1];
    sp_attention_many(pool, a, N, start);
    assert_int_equal(start[N], (1 + 7 + 1 + 3 + 2) * H);
    for (int i = 0; i < N; i++) {
        if (memcmp(buf[i][3], buf[i][4], (size_t)(n_tok[i] * H * D) * sizeof(float)))
            fail_msg("attention %d: rows differ from the attention alone", i);
        for (int b = 0; b < 5; b++)
            free(buf[i][b]);
    }
    free(scr);
    sp_pool_free(pool);
}

static void test_dtype_decoders(void **state)
{
    (void)state;
    /* f16: every finite half round-trips through float */
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00)
            continue;
        float f = sp_f16_to_f32((uint16_t)h);
        assert_int_equal(sp_f32_to_f16(f), h);
    }
    assert_true(sp_f16_to_f32(0x3c00) == 1.0f);
    assert_true(sp_f16_to_f32(0x0001) == 5.9604644775390625e-08f);
    assert_true(sp_bf16_to_f32(0x3f80) == 1.0f);
    assert_int_equal(sp_f32_to_bf16(1.00390625f), 0x3f80); /* tie to even */
    assert_int_equal(sp_f32_to_bf16(1.01171875f), 0x3f82);
    /* E4M3FN: max 448, min subnormal 2^-9, NaN at S.1111.111 */
    assert_true(sp_e4m3_to_f32(0x7e) == 448.0f);
    assert_true(sp_e4m3_to_f32(0x01) == 0.001953125f);
    assert_true(sp_e4m3_to_f32(0x38) == 1.0f);
    assert_true(sp_e4m3_to_f32(0xb8) == -1.0f);
    assert_true(isnan(sp_e4m3_to_f32(0x7f)));
    assert_true(sp_e8m0_to_f32(127) == 1.0f);
    assert_true(sp_e8m0_to_f32(0) == ldexpf(1.0f, -127));
    assert_true(isnan(sp_e8m0_to_f32(255)));
    assert_true(sp_e2m1_table[7] == 6.0f && sp_e2m1_table[9] == -0.5f);
}

static void test_rope_known_values(void **state)
{
    (void)state;
    /* gpt-oss: d=64, base 150000, yarn factor 32, O=4096, truncate false:
     * attention factor 0.1*ln(32)+1 = 1.34657 (FORMATS.md 2.1) */
    sp_rope_config c = {.type = SP_ROPE_YARN, .theta = 150000, .factor = 32,
                        .original_max_pos = 4096, .beta_fast = 32, .beta_slow = 1,
                        .truncate = false, .partial_rotary_factor = 1};
    sp_rope r;
    assert_int_equal(sp_rope_init(&r, &c, 64, 131072, "test", NULL), SP_OK);
    assert_true(fabsf(r.attention_factor - 1.34657f) < 1e-5f);
    assert_true(fabsf(r.inv_freq[0] - 1.0f) < 1e-7f);
    /* far past the high correction dim (17.4) every frequency is interpolated */
    float plain = 1.0f / powf(150000.0f, 62.0f / 64.0f);
    assert_true(fabsf(r.inv_freq[31] - plain / 32.0f) < 1e-6f * plain);
    /* llama3 with Llama-3.1 numbers: 29 divided, 29 kept, 6 smoothed (d=128) */
    sp_rope_config l3 = {.type = SP_ROPE_LLAMA3, .theta = 500000, .factor = 8,
                         .low_freq_factor = 1, .high_freq_factor = 4, .original_max_pos = 8192,
                         .partial_rotary_factor = 1};
    assert_int_equal(sp_rope_init(&r, &l3, 128, 131072, "test", NULL), SP_OK);
    int kept = 0, divided = 0;
    for (int i = 0; i < 64; i++) {
        float base = 1.0f / powf(500000.0f, (float)(2 * i) / 128.0f);
        if (r.inv_freq[i] == base)
            kept++;
        else if (fabsf(r.inv_freq[i] - base / 8) < 1e-7f * base)
            divided++;
    }
    assert_int_equal(kept, 29);
    assert_int_equal(divided, 29);
}

/* sp_topk_torch against libstdc++ itself: 3000 tie-heavy cases (few distinct values, -inf
 * tails, both the nth_element and the partial_sort regime) drawn from this LCG; the hash of
 * the chosen index sets was computed by a C++ program running std::nth_element /
 * std::partial_sort with torch.topk's comparator on the same cases (GCC 12's libstdc++). */
static uint64_t lcg_state;
static uint32_t lcg(void)
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(lcg_state >> 33);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_topk_torch_vs_libstdcxx(void **state)
{
    (void)state;
    lcg_state = 42;
    uint64_t h = 1469598103934665603ull;
    sp_topk_elem q[300];
    int64_t sel[300];
    for (int it = 0; it < 3000; it++) {
        int n = 1 + (int)(lcg() % 300), k = 1 + (int)(lcg() % (uint32_t)n);
        if (it % 3 == 0)
            k = 1 + (int)(lcg() % (uint32_t)(n / 64 + 1));
        if (k > n)
            k = n;
        int levels = 1 + (int)(lcg() % 6), nvalid = 1 + (int)(lcg() % (uint32_t)n);
        for (int j = 0; j < n; j++) {
            float v = j < nvalid ? (float)(lcg() % (uint32_t)levels) - 2.0f : -INFINITY;
            if (j < nvalid && lcg() % 4 == 0)
                v = (float)(lcg() % 1000) / 1000.0f;
            q[j] = (sp_topk_elem){v, j};
        }
        sp_topk_torch(q, n, k);
        for (int j = 0; j < k; j++)
            sel[j] = q[j].i;
        qsort(sel, (size_t)k, sizeof sel[0], cmp_i64);
        for (int j = 0; j < k; j++)
            h = (h ^ (uint64_t)sel[j]) * 1099511628211ull;
        h = (h ^ 0xffu) * 1099511628211ull;
    }
    assert_true(h == 0xeead3b60aca49d3bull);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_vs_reference), cmocka_unit_test(test_matmul_every_isa),
        cmocka_unit_test(test_q8_input_rounding), cmocka_unit_test(test_fast_mxfp4_avx2_equals_avx512),
        cmocka_unit_test(test_matmul_grouped), cmocka_unit_test(test_keep_exact),
        cmocka_unit_test(test_bf16_input_rounding), cmocka_unit_test(test_mxfp4_fast_scales),
        cmocka_unit_test(test_bf16_fma_equals_vdpbf16ps),
        cmocka_unit_test(test_swiglu_levels), cmocka_unit_test(test_rmsnorm_vs_reference),
        cmocka_unit_test(test_attention_vs_reference), cmocka_unit_test(test_attention_many),
        cmocka_unit_test(test_dtype_decoders),
        cmocka_unit_test(test_rope_known_values), cmocka_unit_test(test_topk_torch_vs_libstdcxx),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
