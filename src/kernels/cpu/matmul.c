/* matmul.c: the CPU matrix products (see matmul.h): the reference decoders, the choice
 * of a row kernel by ISA level, precision and format (matmul_isa.h), the one-off input
 * preparation a kernel asks for, and the split of rows across threads. The row kernels
 * themselves live in matmul_generic.c / matmul_avx2.c / matmul_avx512*.c. */
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/simd.h"
#include "util/dtype.h"

#include <stdbool.h>
#include <stdlib.h>

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
        memcpy(&s, w->scales + (size_t)((r + w->row_offset) / 128) * w->scale_row_bytes + 4 * (size_t)(c / 128), 4);
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

/* ---- the row kernels: choice, input preparation, threads ---------------------------- */

static sp_mm_kernel pick_kernel(const sp_weight *w, sp_precision prec)
{
    switch (sp_isa_active()) {
#ifdef SP_HAVE_AVX512BF16_KERNELS
    case SP_ISA_AVX512_BF16:
        return prec == SP_PRECISION_FAST ? sp_mm_pick_avx512bf16(w) : sp_mm_pick_avx512(w);
#endif
#ifdef SP_HAVE_AVX512_KERNELS
    case SP_ISA_AVX512: return sp_mm_pick_avx512(w);
#endif
#ifdef SP_HAVE_AVX2_KERNELS
    case SP_ISA_AVX2: return sp_mm_pick_avx2(w);
#endif
    default: return sp_mm_pick_generic(w);
    }
}

void sp_matmul_round_input(const sp_weight *w, const float *x, int64_t n, uint16_t *out)
{
    sp_mm_kernel k = pick_kernel(w, SP_PRECISION_FAST);
    if (k.prep == SP_MM_PREP_BF16 && k.prep_fn) {
        k.prep_fn(x, n, out);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        out[i] = sp_mm_round_bf16(x[i]);
}

const char *sp_matmul_kernel_name(const sp_weight *w, sp_precision prec)
{
    return pick_kernel(w, prec).name;
}

/* Writes tokens [t0, t1) of x in the layout kernel k reads (matmul_isa.h) into buf. */
static void prepare_input(sp_mm_prep prep, const float *x, int64_t t0, int64_t t1, int64_t cols,
                          void *buf)
{
    if (prep == SP_MM_PREP_BF16) {
        uint16_t *o = buf;
        for (int64_t i = t0 * cols; i < t1 * cols; i++)
            o[i] = sp_mm_round_bf16(x[i]);
        return;
    }
    float *o = buf; /* SP_MM_PREP_PAIRS: cols is a multiple of 32 */
    for (int64_t t = t0; t < t1; t++)
        for (int64_t k = 0; k < cols; k += 32) {
            const float *xs = x + t * cols + k;
            float *os = o + t * cols + k;
            for (int i = 0; i < 16; i++) {
                os[i] = xs[2 * i];
                os[16 + i] = xs[2 * i + 1];
            }
        }
}

typedef struct prep_job {
    const sp_mm_kernel *k;
    const float *x;
    int64_t cols;
    void *buf;
} prep_job;

static void prep_task(void *ctx, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const prep_job *p = ctx;
    if (p->k->prep_fn) {
        size_t esz = p->k->prep == SP_MM_PREP_BF16 ? 2 : 4;
        p->k->prep_fn(p->x + b * p->cols, (e - b) * p->cols, (char *)p->buf + (size_t)(b * p->cols) * esz);
        return;
    }
    prepare_input(p->k->prep, p->x, b, e, p->cols, p->buf);
}

static void matmul_task(void *ctx, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const sp_mm_kernel *k = ((const void **)ctx)[0];
    const sp_mm_job *j = ((const void **)ctx)[1];
    k->fn(j, b, e);
}

void sp_matmul_prec(sp_pool *pool, sp_precision prec, const sp_weight *w, const float *x,
                    int64_t n_tok, float *y, const float *bias)
{
    if (n_tok <= 0 || w->rows <= 0)
        return;
    sp_mm_kernel k = pick_kernel(w, prec);
    sp_mm_job j = {w, x, NULL, n_tok, y, bias};
    void *heap = NULL;
    if (k.prep != SP_MM_PREP_NONE) {
        size_t bytes = (size_t)(n_tok * w->cols) * (k.prep == SP_MM_PREP_BF16 ? 2 : 4);
        void *buf = pool ? sp_pool_scratch(pool, bytes) : NULL;
        if (!buf)
            buf = heap = malloc(bytes);
        if (!buf) { /* no memory for the prepared copy: the exact 8-lane kernels need none */
#ifdef SP_HAVE_AVX2_KERNELS
            k = sp_isa_active() >= SP_ISA_AVX2 ? sp_mm_pick_avx2(w) : sp_mm_pick_generic(w);
#else
            k = sp_mm_pick_generic(w);
#endif
        } else {
            /* a prefill's inputs are worth preparing on every thread */
            prep_job pj = {&k, x, w->cols, buf};
            sp_pool_run(n_tok * w->cols < (1 << 15) ? NULL : pool, n_tok, 1, prep_task, &pj);
            j.xp = buf;
        }
    }
    const void *ctx[2] = {&k, &j};
    /* Small products are not worth waking the workers. */
    int64_t work = w->rows * w->cols * n_tok;
    sp_pool_run(work < (1 << 15) ? NULL : pool, w->rows, 16, matmul_task, (void *)ctx);
    free(heap);
}

void sp_matmul(sp_pool *pool, const sp_weight *w, const float *x, int64_t n_tok, float *y,
               const float *bias)
{
    sp_matmul_prec(pool, sp_pool_precision(pool), w, x, n_tok, y, bias);
}

void sp_matmul_ref_prec(sp_precision prec, const sp_weight *w, const float *x, int64_t n_tok,
                        float *y, const float *bias)
{
    if (prec == SP_PRECISION_EXACT) {
        sp_matmul_ref(w, x, n_tok, y, bias);
        return;
    }
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < w->rows; r++) {
            double s = 0.0;
            for (int64_t c = 0; c < w->cols; c++)
                s += (double)sp_bf16_to_f32(sp_mm_round_bf16(x[t * w->cols + c])) *
                     (double)sp_weight_at(w, r, c);
            if (bias)
                s += bias[r];
            y[t * w->rows + r] = (float)s;
        }
}

/* ---- transposed products: y = x W[row0 : row0 + n_in, :] -----------------------------
 * Each output column c accumulates x[i] * W[row0 + i, c] for i ascending, 8 columns per
 * vector lane group. Columns are handed to threads in aligned groups of 8 and the last
 * cols % 8 columns always take the scalar path, so a value's rounding depends only on
 * the matrix shape, never on the batch or the thread count. */

#define T_GROUP 8

typedef struct matmul_t_job {
    const sp_weight *w;
    int64_t row0, n_in, x_stride, n_tok, y_stride;
    const float *x, *bias;
    float *y;
} matmul_t_job;

/* Decodes columns [c0, c0 + n) of row r into out (vector-friendly for dense formats). */
static void decode_cols(const sp_weight *w, int64_t r, int64_t c0, int64_t n, float *out)
{
    const unsigned char *row = sp_weight_row(w, r);
    switch (w->format) {
    case SP_WF_F32: memcpy(out, row + 4 * c0, (size_t)n * sizeof(float)); return;
    case SP_WF_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, row + 2 * (c0 + i), 2);
            out[i] = sp_bf16_to_f32(h);
        }
        return;
    default:
        for (int64_t i = 0; i < n; i++)
            out[i] = sp_weight_at(w, r, c0 + i);
        return;
    }
}

static void matmul_t_task(void *ctx, int64_t gb, int64_t ge, int thread)
{
    (void)thread;
    const matmul_t_job *j = ctx;
    const sp_weight *w = j->w;
    int64_t c0 = gb * T_GROUP, c1 = ge * T_GROUP < w->cols ? ge * T_GROUP : w->cols;
    int64_t cols8 = w->cols & ~(int64_t)7, vec_end = c1 < cols8 ? c1 : cols8;
    float buf[512];
    for (int64_t t = 0; t < j->n_tok; t++)
        for (int64_t c = c0; c < c1; c++)
            j->y[t * j->y_stride + c] = j->bias ? j->bias[c] : 0.0f;
    for (int64_t cb = c0; cb < c1; cb += 512) {
        int64_t ce = cb + 512 < c1 ? cb + 512 : c1;
        int64_t ve = ce < vec_end ? ce : vec_end;
        for (int64_t i = 0; i < j->n_in; i++) {
            decode_cols(w, j->row0 + i, cb, ce - cb, buf);
            for (int64_t t = 0; t < j->n_tok; t++) {
                float xv = j->x[t * j->x_stride + i];
                float *yr = j->y + t * j->y_stride;
                sp_v8 xb = sp_v8_set1(xv);
                int64_t c = cb;
                for (; c + 8 <= ve; c += 8)
                    sp_v8_store(yr + c, sp_v8_fmadd(xb, sp_v8_load(buf + (c - cb)), sp_v8_load(yr + c)));
                for (; c < ce; c++)
                    yr[c] += xv * buf[c - cb];
            }
        }
    }
}

void sp_matmul_t(sp_pool *pool, const sp_weight *w, int64_t row0, int64_t n_in, const float *x,
                 int64_t x_stride, int64_t n_tok, float *y, int64_t y_stride, const float *bias)
{
    matmul_t_job j = {w, row0, n_in, x_stride, n_tok, y_stride, x, bias, y};
    int64_t groups = (w->cols + T_GROUP - 1) / T_GROUP;
    int64_t work = n_in * w->cols * n_tok;
    sp_pool_run(work < (1 << 15) ? NULL : pool, groups, 8, matmul_t_task, &j);
}

void sp_matmul_t_ref(const sp_weight *w, int64_t row0, int64_t n_in, const float *x,
                     int64_t x_stride, int64_t n_tok, float *y, int64_t y_stride, const float *bias)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t c = 0; c < w->cols; c++) {
            double s = bias ? bias[c] : 0.0;
            for (int64_t i = 0; i < n_in; i++)
                s += (double)x[t * x_stride + i] * (double)sp_weight_at(w, row0 + i, c);
            y[t * y_stride + c] = (float)s;
        }
}
