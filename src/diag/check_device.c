/* check_device.c: on a backend other than the CPU, every packed matrix (MXFP4, NVFP4, FP8
 * blocks) decoded by the backend's own decoder must equal the CPU reference decoder's
 * values bit for bit: nibble order, block order, scale indexing and the global scale are
 * where FP4 kernels go wrong while every piece "passes". Rows checked per matrix: all of
 * them up to 256, else 256 spread over the matrix (first and last included). */
#include "diag/check_internal.h"
#include "engine/exec_weights.h"
#include "kernels/cpu/matmul.h"
#include "model/model_walk.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 256

typedef struct decode_ctx {
    sp_model *m;
    int64_t n_mats, n_rows, n_values;
    char bad[256];
    int64_t bad_row, bad_col;
    float want, got;
    char err[SP_ERROR_MSG_BYTES];
} decode_ctx;

static bool packed(sp_wformat f)
{
    return f == SP_WF_MXFP4 || f == SP_WF_NVFP4 || f == SP_WF_FP8_BLOCK;
}

/* Decodes rows ids[0..n) of w on the backend into out [n, cols]. */
static sp_status decode_on_backend(sp_model *m, const sp_weight *w, const int32_t *ids, int64_t n,
                                   float *out, sp_error *err)
{
    sp_backend *be = m->be;
    sp_weight dw = sp_exec_weight_of(m, w);
    if (!dw.data)
        return sp_err(err, SP_ERR_INTERNAL, "%s: not on the device", w->name);
    void *d_ids = NULL, *d_out = NULL;
    size_t out_bytes = (size_t)n * (size_t)w->cols * sizeof(float);
    sp_status st = be->ops->alloc(be, (size_t)n * sizeof(int32_t), &d_ids, err);
    if (st == SP_OK)
        st = be->ops->alloc(be, out_bytes, &d_out, err);
    if (st == SP_OK)
        st = be->ops->upload(be, d_ids, ids, (size_t)n * sizeof(int32_t), err);
    if (st == SP_OK) {
        be->ops->embed(be, &dw, d_ids, n, d_out);
        st = be->ops->finish(be, err);
    }
    if (st == SP_OK)
        st = be->ops->download(be, out, d_out, out_bytes, err);
    be->ops->free(be, d_ids);
    be->ops->free(be, d_out);
    return st;
}

static void decode_matrix(void *vctx, const char *name, const sp_weight *w)
{
    decode_ctx *c = vctx;
    if (!packed(w->format) || c->bad[0] || c->err[0])
        return;
    int64_t n = w->rows < MAX_ROWS ? w->rows : MAX_ROWS;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    float *got = malloc((size_t)n * (size_t)w->cols * sizeof *got);
    float *want = malloc((size_t)w->cols * sizeof *want);
    sp_error e = {0};
    if (!ids || !got || !want) {
        snprintf(c->err, sizeof c->err, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)(n == w->rows ? i : i * (w->rows - 1) / (n - 1));
    if (decode_on_backend(c->m, w, ids, n, got, &e) != SP_OK) {
        snprintf(c->err, sizeof c->err, "%s", e.msg);
        goto done;
    }
    for (int64_t i = 0; i < n && !c->bad[0]; i++) {
        sp_weight_row_f32(w, ids[i], want);
        const float *g = got + i * w->cols;
        for (int64_t j = 0; j < w->cols; j++) {
            bool both_nan = want[j] != want[j] && g[j] != g[j];
            if (!both_nan && memcmp(&want[j], &g[j], sizeof(float))) {
                snprintf(c->bad, sizeof c->bad, "%s", name);
                c->bad_row = ids[i];
                c->bad_col = j;
                c->want = want[j];
                c->got = g[j];
                break;
            }
        }
    }
    c->n_mats++;
    c->n_rows += n;
    c->n_values += n * w->cols;
done:
    free(ids);
    free(got);
    free(want);
}

void sp_check_device_decode(sp_model *m, const char *label, sp_check_report *rep)
{
    char name[64];
    snprintf(name, sizeof name, "device decode%s", label);
    if (m->be->host_memory)
        return;
    decode_ctx c = {.m = m};
    sp_walk_fns f = {decode_matrix, NULL};
    sp_model_walk(m, &f, &c);
    if (c.err[0])
        sp_check_add(rep, name, SP_CHECK_FAIL, "decoding on %s failed: %s", sp_model_device(m), c.err);
    else if (c.bad[0])
        sp_check_add(rep, name, SP_CHECK_FAIL,
                     "%s row %lld column %lld: %s decodes %.9g, the CPU reference decoder %.9g",
                     c.bad, (long long)c.bad_row, (long long)c.bad_col, sp_model_device(m),
                     (double)c.got, (double)c.want);
    else if (c.n_mats == 0)
        sp_check_add(rep, name, SP_CHECK_PASS, "no packed (FP4/FP8) matrices");
    else
        sp_check_add(rep, name, SP_CHECK_PASS,
                     "%lld packed matrices, %lld rows, %lld values decoded on %s equal the CPU "
                     "decoder bit for bit", (long long)c.n_mats, (long long)c.n_rows,
                     (long long)c.n_values, sp_model_device(m));
}
