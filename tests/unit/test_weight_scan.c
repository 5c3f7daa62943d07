/* test_weight_scan.c: sp_weight_scan_matrix (src/diag/weight_scan.h) gives exactly what
 * decoding every element with sp_weight_at and scanning row by row gives — the first
 * non-finite element (row, column, value) and the largest |value| — for every weight
 * format, partial scale blocks, an FP8 row view, thread counts 1-3, and planted faults:
 * NaN and infinite values, NaN and infinite block scales, FP4 products that overflow
 * (E8M0 254 with a code of magnitude >= 2), FP8 NaN codes. */
#include "test_util.h"
#include "test_weight_layout.h"
#include "diag/weight_scan.h"
#include "kernels/cpu/matmul.h"
#include "util/dtype.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345u;
static uint32_t rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

typedef struct owned {
    sp_weight w;
    unsigned char *data, *scales;
} owned;

/* A random matrix of format f whose values are all finite. */
static owned make(sp_wformat f, int64_t rows, int64_t cols)
{
    owned o = {0};
    sp_weight *w = &o.w;
    size_t sbytes = test_weight_layout(w, f, rows, cols);
    w->name = "scan";
    if (f == SP_WF_NVFP4)
        w->global_scale = 0.3712f;
    size_t dbytes = w->row_bytes * (size_t)rows;
    o.data = malloc(dbytes + 1);
    o.scales = malloc(sbytes + 1);
    for (size_t i = 0; i < dbytes; i++)
        o.data[i] = (unsigned char)rnd();
    if (f == SP_WF_F32 || f == SP_WF_BF16 || f == SP_WF_F16) /* clear exponent-all-ones values */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                unsigned char *p = o.data + (size_t)r * w->row_bytes;
                if (f == SP_WF_F32) {
                    float v = (test_frand() - 0.5f) * 8.0f;
                    memcpy(p + 4 * c, &v, 4);
                } else if (f == SP_WF_BF16) {
                    uint16_t h = (uint16_t)(rnd() & 0xbfff); /* exponent < 0x80 */
                    memcpy(p + 2 * c, &h, 2);
                } else {
                    uint16_t h = (uint16_t)(rnd() & 0xbbff); /* exponent < 0x1f */
                    memcpy(p + 2 * c, &h, 2);
                }
            }
    if (f == SP_WF_FP8_BLOCK)
        for (size_t i = 0; i < dbytes; i++)
            if ((o.data[i] & 0x7f) == 0x7f)
                o.data[i] ^= 1;
    for (size_t i = 0; i < sbytes; i++)
        o.scales[i] = f == SP_WF_MXFP4 ? (unsigned char)(110 + rnd() % 30)
                                       : (unsigned char)(rnd() % 0x7e); /* E4M3, no NaN */
    if (f == SP_WF_FP8_BLOCK)
        for (size_t i = 0; i + 4 <= sbytes; i += 4) {
            float s = 0.001f + test_frand() * 0.01f;
            memcpy(o.scales + i, &s, 4);
        }
    w->data = o.data;
    w->scales = sbytes ? o.scales : NULL;
    return o;
}

/* The reference: every element decoded. */
static sp_weight_scan brute(const sp_weight *w)
{
    sp_weight_scan s = {-1, -1, 0.0f, 0.0f};
    for (int64_t r = 0; r < w->rows; r++)
        for (int64_t c = 0; c < w->cols; c++) {
            float v = sp_weight_at(w, r, c);
            if (fabsf(v) > s.amax)
                s.amax = fabsf(v);
            if (!isfinite(v) && s.bad_row < 0) {
                s.bad_row = r;
                s.bad_col = c;
                s.bad_value = v;
            }
        }
    return s;
}

static void expect_scan(const sp_weight *w, sp_pool *pool, const char *what)
{
    sp_weight_scan want = brute(w), got;
    sp_weight_scan_matrix(pool, w, &got);
    bool same_bad = got.bad_row == want.bad_row && got.bad_col == want.bad_col &&
                    (want.bad_row < 0 || (isnan(got.bad_value) && isnan(want.bad_value)) ||
                     got.bad_value == want.bad_value);
    if (!same_bad || memcmp(&got.amax, &want.amax, 4))
        fail_msg("%s %s %lldx%lld (%d threads): scan bad (%lld, %lld, %g) amax %.9g, decoding gives (%lld, %lld, "
                 "%g) amax %.9g", sp_wformat_name(w->format), what, (long long)w->rows, (long long)w->cols,
                 sp_pool_n_threads(pool), (long long)got.bad_row, (long long)got.bad_col, (double)got.bad_value,
                 (double)got.amax, (long long)want.bad_row, (long long)want.bad_col, (double)want.bad_value,
                 (double)want.amax);
}

/* Plants fault `kind` at row r, column c of o (0 NaN value, 1 infinite value, 2 NaN scale,
 * 3 infinite or overflowing scale); false when the format has no such fault. */
static bool plant(owned *o, int kind, int64_t r, int64_t c)
{
    sp_weight *w = &o->w;
    unsigned char *row = o->data + (size_t)r * w->row_bytes;
    switch (w->format) {
    case SP_WF_F32: {
        if (kind > 1)
            return false;
        float v = kind == 0 ? NAN : -INFINITY;
        memcpy(row + 4 * c, &v, 4);
        return true;
    }
    case SP_WF_BF16:
    case SP_WF_F16: {
        if (kind > 1)
            return false;
        uint16_t h = w->format == SP_WF_BF16 ? (kind == 0 ? 0x7fc1 : 0xff80) : (kind == 0 ? 0x7e01 : 0x7c00);
        memcpy(row + 2 * c, &h, 2);
        return true;
    }
    case SP_WF_MXFP4:
    case SP_WF_NVFP4: {
        const int64_t bs = w->format == SP_WF_MXFP4 ? 32 : 16;
        unsigned char *sb = o->scales + (size_t)r * w->scale_row_bytes + (size_t)(c / bs);
        if (kind == 0 || kind == 2) {
            *sb = w->format == SP_WF_MXFP4 ? 0xff : 0x7f;
            return true;
        }
        if (w->format == SP_WF_NVFP4) { /* a global scale so large the products overflow */
            w->global_scale = 3e37f;
            return true;
        }
        *sb = 254; /* 2^127: codes of magnitude >= 2 overflow */
        row[c / 2] = (unsigned char)((c & 1) ? (row[c / 2] & 0x0f) | 0x60 : (row[c / 2] & 0xf0) | 0x6);
        return true;
    }
    default: { /* FP8 */
        if (kind == 0) {
            row[c] = 0xff;
            return true;
        }
        float s = kind == 1 ? INFINITY : kind == 2 ? NAN : 3e37f;
        memcpy(o->scales + (size_t)((r + w->row_offset) / 128) * w->scale_row_bytes + 4 * (size_t)(c / 128), &s, 4);
        return true;
    }
    }
}

static void test_scan_matches_decoding(void **state)
{
    (void)state;
    const sp_wformat formats[] = {SP_WF_F32, SP_WF_BF16, SP_WF_F16, SP_WF_MXFP4, SP_WF_NVFP4, SP_WF_FP8_BLOCK};
    const int64_t shapes[][2] = {{1, 1}, {7, 64}, {37, 200}, {130, 259}, {260, 96}};
    sp_pool *pools[4] = {NULL};
    for (int t = 1; t <= 3; t++)
        assert_int_equal(sp_pool_new(t, &pools[t], NULL), SP_OK);
    for (size_t fi = 0; fi < sizeof formats / sizeof formats[0]; fi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int kind = -1; kind < 4; kind++)
                for (int where = 0; where < 2; where++) {
                    if (kind < 0 && where)
                        continue;
                    owned o = make(formats[fi], shapes[si][0], shapes[si][1]);
                    int64_t r = where ? o.w.rows - 1 : o.w.rows / 2, c = where ? o.w.cols - 1 : o.w.cols / 3;
                    if (kind >= 0 && !plant(&o, kind, r, c)) {
                        free(o.data);
                        free(o.scales);
                        continue;
                    }
                    if (kind >= 0 && where) /* a second fault after the first */
                        plant(&o, kind, o.w.rows - 1, 0);
                    for (int t = 0; t <= 3; t++)
                        expect_scan(&o.w, pools[t], kind < 0 ? "clean" : "planted");
                    if (formats[fi] == SP_WF_FP8_BLOCK && o.w.rows > 3) { /* a row view */
                        sp_weight v = sp_weight_rows(&o.w, 3, o.w.rows - 3);
                        expect_scan(&v, pools[2], "row view");
                    }
                    free(o.data);
                    free(o.scales);
                }
    for (int t = 1; t <= 3; t++)
        sp_pool_free(pools[t]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scan_matches_decoding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
