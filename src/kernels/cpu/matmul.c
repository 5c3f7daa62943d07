/* matmul.c: the CPU matrix-vector/matrix-matrix kernels (see matmul.h).
 *
 * Register tiling: R rows x T tokens accumulate in R*T 8-lane vectors; each weight chunk
 * is decoded once per tile and reused for T tokens. Tokens are processed in blocks that
 * fit in cache. Tiles change only how work is grouped, never the order in which one
 * output element is accumulated. */
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/simd.h"
#include "util/dtype.h"

#include <stdbool.h>

#define TOKEN_BLOCK 32

const char *sp_wformat_name(sp_wformat f)
{
    switch (f) {
    case SP_WF_NONE: return "none";
    case SP_WF_F32: return "F32";
    case SP_WF_BF16: return "BF16";
    case SP_WF_F16: return "F16";
    case SP_WF_MXFP4: return "MXFP4";
    case SP_WF_NVFP4: return "NVFP4";
    case SP_WF_FP8_BLOCK: return "FP8 (128x128 block scales)";
    }
    return "?";
}

float sp_weight_at(const sp_weight *w, int64_t r, int64_t c)
{
    const unsigned char *row = sp_weight_row(w, r);
    switch (w->format) {
    case SP_WF_F32: {
        float f;
        memcpy(&f, row + 4 * c, 4);
        return f;
    }
    case SP_WF_BF16: {
        uint16_t h;
        memcpy(&h, row + 2 * c, 2);
        return sp_bf16_to_f32(h);
    }
    case SP_WF_F16: {
        uint16_t h;
        memcpy(&h, row + 2 * c, 2);
        return sp_f16_to_f32(h);
    }
    case SP_WF_MXFP4: {
        unsigned b = row[c / 2];
        unsigned code = (c & 1) ? b >> 4 : b & 15;
        uint8_t s = w->scales[(size_t)r * w->scale_row_bytes + (size_t)(c / 32)];
        return sp_e2m1_table[code] * sp_e8m0_to_f32(s);
    }
    case SP_WF_NVFP4: {
        unsigned b = row[c / 2];
        unsigned code = (c & 1) ? b >> 4 : b & 15;
        uint8_t s = w->scales[(size_t)r * w->scale_row_bytes + (size_t)(c / 16)];
        return sp_e2m1_table[code] * (sp_e4m3_to_f32(s) * w->global_scale);
    }
    case SP_WF_FP8_BLOCK: {
        float s;
        memcpy(&s, w->scales + (size_t)(r / 128) * w->scale_row_bytes + 4 * (size_t)(c / 128), 4);
        return sp_e4m3_to_f32(row[c]) * s;
    }
    case SP_WF_NONE: break;
    }
    return 0.0f;
}

void sp_weight_row_f32(const sp_weight *w, int64_t r, float *out)
{
    for (int64_t c = 0; c < w->cols; c++)
        out[c] = sp_weight_at(w, r, c);
}

void sp_matmul_ref(const sp_weight *w, const float *x, int64_t n_tok, float *y,
                   const float *bias)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < w->rows; r++) {
            double s = 0.0;
            for (int64_t c = 0; c < w->cols; c++)
                s += (double)x[t * w->cols + c] * (double)sp_weight_at(w, r, c);
            if (bias)
                s += bias[r];
            y[t * w->rows + r] = (float)s;
        }
}

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

/* Computes the R x T tile at rows r0.., tokens t0.. . */
static inline __attribute__((always_inline)) void
dense_tile(const sp_wformat f, const int R, const int T, const sp_weight *w, const float *x,
           int64_t r0, int64_t t0, float *y, const float *bias)
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
            sp_v8 wv = load_w8(f, rows[r], k);
            for (int t = 0; t < T; t++)
                acc[r][t] = sp_v8_fmadd(xv[t], wv, acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float s = sp_v8_hsum(acc[r][t]);
            for (int64_t k = n8; k < n; k++)
                s += xs[t][k] * load_w1(f, rows[r], k);
            if (bias)
                s += bias[r0 + r];
            y[(t0 + t) * w->rows + r0 + r] = s;
        }
}

static inline __attribute__((always_inline)) void
dense_rows(const sp_wformat f, const sp_weight *w, const float *x, int64_t n_tok, float *y,
           const float *bias, int64_t rb, int64_t re)
{
    for (int64_t tb = 0; tb < n_tok; tb += TOKEN_BLOCK) {
        int64_t te = tb + TOKEN_BLOCK < n_tok ? tb + TOKEN_BLOCK : n_tok;
        int64_t r = rb;
        for (; r + 4 <= re; r += 4) {
            int64_t t = tb;
            for (; t + 2 <= te; t += 2)
                dense_tile(f, 4, 2, w, x, r, t, y, bias);
            if (t < te)
                dense_tile(f, 4, 1, w, x, r, t, y, bias);
        }
        for (; r < re; r++) {
            int64_t t = tb;
            for (; t + 2 <= te; t += 2)
                dense_tile(f, 1, 2, w, x, r, t, y, bias);
            if (t < te)
                dense_tile(f, 1, 1, w, x, r, t, y, bias);
        }
    }
}

static void rows_f32(const sp_weight *w, const float *x, int64_t n, float *y, const float *b,
                     int64_t rb, int64_t re)
{
    dense_rows(SP_WF_F32, w, x, n, y, b, rb, re);
}
static void rows_bf16(const sp_weight *w, const float *x, int64_t n, float *y, const float *b,
                      int64_t rb, int64_t re)
{
    dense_rows(SP_WF_BF16, w, x, n, y, b, rb, re);
}
static void rows_f16(const sp_weight *w, const float *x, int64_t n, float *y, const float *b,
                     int64_t rb, int64_t re)
{
    dense_rows(SP_WF_F16, w, x, n, y, b, rb, re);
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
        memcpy(&s, w->scales + (size_t)(r / 128) * w->scale_row_bytes + 4 * (size_t)(c / 128),
               4);
        return s;
    }
    default: return 1.0f;
    }
}

/* Decodes 8 elements [k, k+8) of row r (k a multiple of 8, scale blocks are multiples of 8). */
static inline void quant_decode8(const sp_weight *w, int64_t r, int64_t k, float out[8])
{
    const unsigned char *row = sp_weight_row(w, r);
    float s = quant_scale(w, r, k);
    if (w->format == SP_WF_FP8_BLOCK) {
        for (int i = 0; i < 8; i++)
            out[i] = sp_e4m3_to_f32(row[k + i]) * s;
        return;
    }
    for (int i = 0; i < 4; i++) {
        unsigned b = row[k / 2 + i];
        out[2 * i] = sp_e2m1_table[b & 15] * s;
        out[2 * i + 1] = sp_e2m1_table[b >> 4] * s;
    }
}

static void rows_quant(const sp_weight *w, const float *x, int64_t n_tok, float *y,
                       const float *bias, int64_t rb, int64_t re)
{
    const int64_t n = w->cols, n8 = n & ~(int64_t)7;
    for (int64_t r = rb; r < re; r++) {
        for (int64_t tb = 0; tb < n_tok; tb += 4) {
            int T = n_tok - tb < 4 ? (int)(n_tok - tb) : 4;
            sp_v8 acc[4];
            for (int t = 0; t < T; t++)
                acc[t] = sp_v8_zero();
            float buf[8];
            for (int64_t k = 0; k < n8; k += 8) {
                quant_decode8(w, r, k, buf);
                sp_v8 wv = sp_v8_load(buf);
                for (int t = 0; t < T; t++)
                    acc[t] = sp_v8_fmadd(sp_v8_load(x + (tb + t) * n + k), wv, acc[t]);
            }
            for (int t = 0; t < T; t++) {
                float s = sp_v8_hsum(acc[t]);
                for (int64_t k = n8; k < n; k++)
                    s += x[(tb + t) * n + k] * sp_weight_at(w, r, k);
                if (bias)
                    s += bias[r];
                y[(tb + t) * w->rows + r] = s;
            }
        }
    }
}

typedef void (*rows_fn)(const sp_weight *, const float *, int64_t, float *, const float *,
                        int64_t, int64_t);

typedef struct matmul_job {
    rows_fn fn;
    const sp_weight *w;
    const float *x;
    int64_t n_tok;
    float *y;
    const float *bias;
} matmul_job;

static void matmul_task(void *ctx, int64_t b, int64_t e, int thread)
{
    (void)thread;
    matmul_job *j = ctx;
    j->fn(j->w, j->x, j->n_tok, j->y, j->bias, b, e);
}

void sp_matmul(sp_pool *pool, const sp_weight *w, const float *x, int64_t n_tok, float *y,
               const float *bias)
{
    rows_fn fn;
    switch (w->format) {
    case SP_WF_F32: fn = rows_f32; break;
    case SP_WF_BF16: fn = rows_bf16; break;
    case SP_WF_F16: fn = rows_f16; break;
    default: fn = rows_quant; break;
    }
    matmul_job j = {fn, w, x, n_tok, y, bias};
    /* Small products are not worth waking the workers. */
    int64_t work = w->rows * w->cols * n_tok;
    sp_pool_run(work < (1 << 15) ? NULL : pool, w->rows, 16, matmul_task, &j);
}
