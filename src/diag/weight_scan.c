/* weight_scan.c: a matrix's first non-finite element and largest |value| from its stored
 * bytes (see weight_scan.h). Rows are cut into ranges for the thread pool; each thread
 * keeps the earliest bad element and the largest value it saw, merged by (row, column)
 * and by max, so the answer does not depend on which thread scanned what. */
#include "diag/weight_scan.h"
#include "kernels/cpu/matmul.h"
#include "util/dtype.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define MAX_THREADS 512

typedef struct scan_part {
    int64_t bad_row, bad_col;
    float bad_value;
    float amax;
} scan_part;

typedef struct scan_job {
    const sp_weight *w;
    scan_part part[MAX_THREADS];
} scan_job;

static void note_amax(scan_part *p, float v)
{
    if (v > p->amax) /* NaN never is */
        p->amax = v;
}

/* The first non-finite element of row r in columns [c0, c1) by decoding them. */
static bool first_bad(const sp_weight *w, int64_t r, int64_t c0, int64_t c1, scan_part *p)
{
    for (int64_t c = c0; c < c1; c++) {
        float v = sp_weight_at(w, r, c);
        if (!isfinite(v)) {
            p->bad_row = r;
            p->bad_col = c;
            p->bad_value = v;
            return true;
        }
    }
    return false;
}

/* ---- dense: exponent bits ---------------------------------------------------------- */

static void scan_dense_row(const sp_weight *w, int64_t r, scan_part *p)
{
    const unsigned char *row = sp_weight_row(w, r);
    const int64_t n = w->cols;
    uint32_t worst = 0; /* the largest magnitude bits of a non-NaN element */
    bool bad = false;
    if (w->format == SP_WF_F32) {
        for (int64_t c = 0; c < n; c++) {
            uint32_t u;
            memcpy(&u, row + 4 * c, 4);
            u &= 0x7fffffffu;
            bad |= u >= 0x7f800000u;
            worst = u <= 0x7f800000u && u > worst ? u : worst;
        }
    } else {
        const uint16_t inf = w->format == SP_WF_BF16 ? 0x7f80 : 0x7c00;
        for (int64_t c = 0; c < n; c++) {
            uint16_t h;
            memcpy(&h, row + 2 * c, 2);
            h &= 0x7fff;
            bad |= h >= inf;
            worst = h <= inf && h > worst ? h : worst;
        }
        if (w->format == SP_WF_BF16)
            worst <<= 16;
    }
    if (w->format == SP_WF_F16) {
        note_amax(p, sp_f16_to_f32((uint16_t)worst));
    } else {
        float v;
        memcpy(&v, &worst, 4);
        note_amax(p, v);
    }
    if (bad)
        first_bad(w, r, 0, n, p);
}

/* ---- block-scaled: scale x largest code magnitude ------------------------------------- */

/* The largest E2M1 magnitude code (0..7) among columns [c0, c1) of an FP4 row. */
static unsigned fp4_max_mag(const unsigned char *row, int64_t c0, int64_t c1)
{
    unsigned m = 0;
    int64_t c = c0;
    if (c & 1) /* a block starting at an odd column (never for whole blocks) */
        m = (row[c++ / 2] >> 4) & 7;
    for (; c + 1 < c1; c += 2) {
        unsigned b = row[c / 2], lo = b & 7, hi = (b >> 4) & 7;
        unsigned x = lo > hi ? lo : hi;
        m = x > m ? x : m;
    }
    if (c < c1) {
        unsigned lo = row[c / 2] & 7;
        m = lo > m ? lo : m;
    }
    return m;
}

/* The largest E4M3 magnitude byte among an FP8 row's columns [c0, c1), NaN codes
 * (0x7f / 0xff) aside; *nan when there is one. */
static unsigned fp8_max_mag(const unsigned char *row, int64_t c0, int64_t c1, bool *nan)
{
    unsigned m = 0;
    bool any = false;
    for (int64_t c = c0; c < c1; c++) {
        unsigned b = row[c] & 0x7f;
        any |= b == 0x7f;
        m = b != 0x7f && b > m ? b : m;
    }
    *nan = any;
    return m;
}

static void scan_blocked_row(const sp_weight *w, int64_t r, scan_part *p)
{
    const unsigned char *row = sp_weight_row(w, r);
    const int64_t n = w->cols;
    const int64_t bs = w->format == SP_WF_MXFP4 ? 32 : w->format == SP_WF_NVFP4 ? 16 : 128;
    bool found = false;
    for (int64_t c0 = 0; c0 < n; c0 += bs) {
        const int64_t c1 = c0 + bs < n ? c0 + bs : n;
        float s, top;
        bool nan_code = false;
        if (w->format == SP_WF_FP8_BLOCK) {
            memcpy(&s, w->scales + (size_t)((r + w->row_offset) / 128) * w->scale_row_bytes + 4 * (size_t)(c0 / 128), 4);
            top = sp_e4m3_to_f32((uint8_t)fp8_max_mag(row, c0, c1, &nan_code)) * fabsf(s);
        } else {
            uint8_t sb = w->scales[(size_t)r * w->scale_row_bytes + (size_t)(c0 / bs)];
            s = w->format == SP_WF_MXFP4 ? sp_e8m0_to_f32(sb) : sp_e4m3_to_f32(sb) * w->global_scale;
            top = sp_e2m1_table[fp4_max_mag(row, c0, c1)] * fabsf(s);
        }
        note_amax(p, top);
        if (!found && (nan_code || !isfinite(top)))
            found = first_bad(w, r, c0, c1, p);
    }
}

static void scan_task(void *ctx, int64_t b, int64_t e, int thread)
{
    scan_job *j = ctx;
    scan_part *p = &j->part[thread];
    const sp_weight *w = j->w;
    bool dense = w->format == SP_WF_F32 || w->format == SP_WF_BF16 || w->format == SP_WF_F16;
    for (int64_t r = b; r < e; r++) {
        scan_part row = {-1, -1, 0.0f, 0.0f};
        if (dense)
            scan_dense_row(w, r, &row);
        else
            scan_blocked_row(w, r, &row);
        note_amax(p, row.amax);
        if (row.bad_row >= 0 && (p->bad_row < 0 || r < p->bad_row)) {
            p->bad_row = row.bad_row;
            p->bad_col = row.bad_col;
            p->bad_value = row.bad_value;
        }
    }
}

void sp_weight_scan_matrix(sp_pool *pool, const sp_weight *w, sp_weight_scan *out)
{
    static const scan_part none = {-1, -1, 0.0f, 0.0f};
    *out = (sp_weight_scan){-1, -1, 0.0f, 0.0f};
    if (w->format == SP_WF_NONE || w->rows <= 0 || w->cols <= 0)
        return;
    scan_job j = {.w = w};
    if (sp_pool_n_threads(pool) > MAX_THREADS) /* never: sp_pool_new caps the count at 512 */
        pool = NULL;
    const int nt = sp_pool_n_threads(pool);
    for (int t = 0; t < nt; t++)
        j.part[t] = none;
    sp_pool_run(pool, w->rows, 8, scan_task, &j);
    for (int t = 0; t < nt; t++) {
        const scan_part *p = &j.part[t];
        if (p->amax > out->amax)
            out->amax = p->amax;
        if (p->bad_row >= 0 && (out->bad_row < 0 || p->bad_row < out->bad_row)) {
            out->bad_row = p->bad_row;
            out->bad_col = p->bad_col;
            out->bad_value = p->bad_value;
        }
    }
}
