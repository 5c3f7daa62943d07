/* check.c: the checkpoint self-tests on weights, scales, the final norm and generation
 * loops, and the driver (see check.h); the speculative, isolation and chat-template
 * checks are in check_spec.c. */
#include "diag/check.h"
#include "diag/check_internal.h"
#include "diag/weight_scan.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/model_walk.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "util/dtype.h"
#include "util/error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sp_check_status_name(sp_check_status s)
{
    return s == SP_CHECK_PASS ? "pass" : s == SP_CHECK_WARN ? "warn" : "FAIL";
}

void sp_check_add(sp_check_report *rep, const char *name, sp_check_status st, const char *fmt, ...)
{
    if (rep->n == rep->cap) {
        size_t cap = rep->cap ? 2 * rep->cap : 16;
        sp_check_result *p = realloc(rep->r, cap * sizeof *p);
        if (!p)
            return;
        rep->r = p;
        rep->cap = cap;
    }
    sp_check_result *r = &rep->r[rep->n++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof r->detail, fmt, ap);
    va_end(ap);
}

void sp_check_report_free(sp_check_report *rep)
{
    free(rep->r);
    memset(rep, 0, sizeof *rep);
}

/* ---- weights finite ------------------------------------------------------------------ */

typedef struct finite_ctx {
    sp_pool *pool;
    char bad[256];
    int64_t bad_row, bad_col;
    float bad_value;
    int64_t n_tensors, n_values;
} finite_ctx;

static void finite_matrix(void *vctx, const char *name, const sp_weight *w)
{
    finite_ctx *c = vctx;
    c->n_tensors++;
    if (c->bad[0])
        return;
    sp_weight_scan ws;
    sp_weight_scan_matrix(c->pool, w, &ws);
    if (ws.bad_row >= 0) {
        snprintf(c->bad, sizeof c->bad, "%s", name);
        c->bad_row = ws.bad_row;
        c->bad_col = ws.bad_col;
        c->bad_value = ws.bad_value;
        return;
    }
    c->n_values += w->rows * w->cols;
}

static void finite_vector(void *vctx, const char *name, const float *v, int64_t n)
{
    finite_ctx *c = vctx;
    c->n_tensors++;
    for (int64_t i = 0; i < n && !c->bad[0]; i++)
        if (!isfinite(v[i])) {
            snprintf(c->bad, sizeof c->bad, "%s", name);
            c->bad_row = -1;
            c->bad_col = i;
            c->bad_value = v[i];
        }
    c->n_values += n;
}

static void check_finite(const sp_model *m, const char *label, sp_pool *pool, sp_check_report *rep)
{
    finite_ctx c = {.pool = pool};
    char name[64];
    snprintf(name, sizeof name, "weights finite%s", label);
    sp_walk_fns f = {finite_matrix, finite_vector};
    sp_model_walk(m, &f, &c);
    if (c.bad[0] && c.bad_row >= 0)
        sp_check_add(rep, name, SP_CHECK_FAIL, "tensor '%s' holds %g at row %lld, column %lld", c.bad,
                     (double)c.bad_value, (long long)c.bad_row, (long long)c.bad_col);
    else if (c.bad[0])
        sp_check_add(rep, name, SP_CHECK_FAIL, "tensor '%s' holds %g at index %lld", c.bad,
                     (double)c.bad_value, (long long)c.bad_col);
    else
        sp_check_add(rep, name, SP_CHECK_PASS, "%lld tensors, %lld values, all finite",
                     (long long)c.n_tensors, (long long)c.n_values);
}

/* ---- FP4 scales ---------------------------------------------------------------------- */

typedef struct scale_ctx {
    int64_t blocks, saturated, zero, nan, matrices, nv_matrices;
    char nan_name[256];
    double amax;        /* largest decoded |w| */
    char amax_name[256];
    sp_pool *pool;
} scale_ctx;

static void scale_matrix(void *vctx, const char *name, const sp_weight *w)
{
    scale_ctx *c = vctx;
    if (w->format != SP_WF_MXFP4 && w->format != SP_WF_NVFP4)
        return;
    c->matrices++;
    bool mx = w->format == SP_WF_MXFP4;
    int64_t per_row = w->cols / (mx ? 32 : 16);
    for (int64_t r = 0; r < w->rows; r++)
        for (int64_t b = 0; b < per_row; b++) {
            uint8_t s = w->scales[(size_t)r * w->scale_row_bytes + (size_t)b];
            bool nan = mx ? s == 0xff : (s & 0x7f) == 0x7f;
            c->blocks++;
            c->nan += nan;
            c->saturated += mx ? s == 0xfe : (s & 0x7f) == 0x7e; /* 2^127 / 448 */
            c->zero += mx ? s == 0 : (s & 0x7f) == 0;
            if (nan && !c->nan_name[0])
                snprintf(c->nan_name, sizeof c->nan_name, "%s", name);
        }
    c->nv_matrices += !mx;
    sp_weight_scan ws;
    sp_weight_scan_matrix(c->pool, w, &ws);
    if (ws.amax > c->amax) {
        c->amax = ws.amax;
        snprintf(c->amax_name, sizeof c->amax_name, "%s", name);
    }
}

static void check_scales(const sp_model *m, const char *label, sp_pool *pool, sp_check_report *rep)
{
    scale_ctx c = {.pool = pool};
    sp_walk_fns f = {scale_matrix, NULL};
    sp_model_walk(m, &f, &c);
    char name[64];
    snprintf(name, sizeof name, "fp4 scales%s", label);
    if (!c.matrices) {
        sp_check_add(rep, name, SP_CHECK_PASS, "no FP4 weights");
        return;
    }
    /* NVFP4's per-tensor scale puts the block holding the tensor's maximum exactly at 448:
     * one saturated block per matrix is the format working as designed */
    int64_t excess = c.saturated - c.nv_matrices;
    excess = excess > 0 ? excess : 0;
    double sat = 100.0 * (double)excess / (double)c.blocks, zero = 100.0 * (double)c.zero / (double)c.blocks;
    if (c.nan)
        sp_check_add(rep, name, SP_CHECK_FAIL, "%lld NaN block scales (first in '%s')", (long long)c.nan,
                     c.nan_name);
    else if (sat > 1.0 || zero > 10.0 || c.amax > 1000.0)
        sp_check_add(rep, name, SP_CHECK_WARN, "%lld matrices, %lld blocks: %.2f%% saturated at the "
                     "format's maximum, %.2f%% zero, largest decoded |w| %.4g in '%s' (a scale that means "
                     "something else?)", (long long)c.matrices, (long long)c.blocks, sat, zero, c.amax,
                     c.amax_name);
    else
        sp_check_add(rep, name, SP_CHECK_PASS, "%lld matrices, %lld blocks: %.3f%% saturated beyond the "
                     "per-tensor maximum, %.3f%% zero; largest decoded |w| %.4g", (long long)c.matrices,
                     (long long)c.blocks, sat, zero, c.amax);
}

/* ---- final norm ------------------------------------------------------------------------ */

typedef struct last_hidden {
    int64_t layer, width;
    float *x;       /* the last layer's output at the last position */
    float *logits;  /* the model's logits there */
} last_hidden;

static void grab_hidden(void *vctx, const sp_trace_event *ev)
{
    last_hidden *h = vctx;
    const float *row = ev->data + (ev->n_tok - 1) * ev->width;
    /* the rows model.norm reads: the last layer's output, or (DeepSeek-V4, whose residual
     * is several streams) the streams collapsed by hc_head, which comes after it */
    if (((ev->op == SP_OP_MLP_RESIDUAL && ev->layer == h->layer) || ev->op == SP_OP_HC_HEAD) &&
        ev->width == h->width)
        memcpy(h->x, row, (size_t)ev->width * sizeof(float));
    if (ev->op == SP_OP_LOGITS)
        memcpy(h->logits, row, (size_t)ev->width * sizeof(float));
}

static double cosine(const float *a, const float *b, int64_t n, double *na, double *nb)
{
    double d = 0;
    *na = *nb = 0;
    for (int64_t i = 0; i < n; i++) {
        d += (double)a[i] * b[i];
        *na += (double)a[i] * a[i];
        *nb += (double)b[i] * b[i];
    }
    *na = sqrt(*na);
    *nb = sqrt(*nb);
    return *na > 0 && *nb > 0 ? d / (*na * *nb) : 0;
}

/* logits of X / div through the final norm and the LM head, into y */
static void scaled_logits(sp_model *m, const float *x, float div, float eps, float *xs, float *xn, float *y)
{
    for (int64_t i = 0; i < m->n_embd; i++)
        xs[i] = x[i] / div;
    sp_rmsnorm(xs, m->final_norm, 1, m->n_embd, eps, xn);
    sp_matmul_prec(NULL, sp_model_precision(m), &m->lm_head, xn, 1, y, NULL);
}

static void check_final_norm(sp_model *m, const int32_t *prompt, size_t n, sp_check_report *rep)
{
    int64_t H = m->n_embd, V = m->n_vocab;
    last_hidden h = {m->n_layers - 1, H, malloc((size_t)H * 4), malloc((size_t)V * 4)};
    float *xs = malloc((size_t)H * 4), *xn = malloc((size_t)H * 4);
    float *y1 = malloc((size_t)V * 4), *y2 = malloc((size_t)V * 4);
    sp_session *s = NULL;
    sp_session_params sp = {.n_ctx = (int64_t)n};
    sp_error err = {0};
    if (!h.x || !h.logits || !xs || !xn || !y1 || !y2 || sp_session_new(m, &sp, &s, &err) != SP_OK) {
        sp_check_add(rep, "final norm", SP_CHECK_FAIL, "could not run: %s", err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    sp_session_set_trace(s, grab_hidden, &h);
    if (sp_session_eval(s, prompt, n, NULL, &err) != SP_OK) {
        sp_check_add(rep, "final norm", SP_CHECK_FAIL, "forward pass failed: %s", err.msg);
        goto done;
    }
    float eps = (float)m->cfg->rms_norm_eps;
    double ms = 0; /* mean square of X: how much the norm's epsilon weighs at each scale */
    for (int64_t i = 0; i < H; i++)
        ms += (double)h.x[i] * h.x[i];
    ms /= (double)H;
    sp_rmsnorm(h.x, m->final_norm, 1, H, eps, xn);
    sp_matmul_prec(NULL, sp_model_precision(m), &m->lm_head, xn, 1, y1, NULL);
    double n1, n2, n3, n0, cos_dn, cos_up;
    scaled_logits(m, h.x, 100.0f, eps, xs, xn, y2);
    cos_dn = cosine(y1, y2, V, &n1, &n2);
    int32_t a_dn = sp_argmax(y2, V);
    scaled_logits(m, h.x, 0.01f, eps, xs, xn, y2);
    cos_up = cosine(y1, y2, V, &n1, &n3);
    double same = cosine(y1, h.logits, V, &n1, &n0);
    /* a working RMSNorm maps s X to X / sqrt(ms + eps / s^2): the logit magnitude ratios
     * eps explains, exactly; a missing or broken norm moves them by about s */
    double want_dn = sqrt((ms + 1e4 * eps) / (ms + eps)), want_up = sqrt((ms + 1e-4 * eps) / (ms + eps));
    double r_dn = n1 / n2, r_up = n1 / n3;
    double wmax = 0;
    for (int64_t i = 0; i < H; i++)
        wmax = fabs(m->final_norm[i]) > wmax ? fabs(m->final_norm[i]) : wmax;
    int32_t a1 = sp_argmax(y1, V), a2 = a_dn != a1 ? a_dn : sp_argmax(y2, V);
    if (wmax == 0 || n1 == 0)
        sp_check_add(rep, "final norm", SP_CHECK_FAIL, "model.norm.weight is all zeros: every logit is 0");
    else if (a1 != a2 || cos_dn < 0.999 || cos_up < 0.999 || fabs(r_dn / want_dn - 1) > 0.01 ||
             fabs(r_up / want_up - 1) > 0.01)
        sp_check_add(rep, "final norm", SP_CHECK_FAIL, "logits from X, X/100 and 100X differ (argmax %d vs %d, "
                     "cosine %.6f / %.6f, magnitude ratios %.4f / %.4f where epsilon explains %.4f / %.4f): "
                     "the final norm does not normalize", a1, a2, cos_dn, cos_up, r_dn, r_up, want_dn, want_up);
    else if (same < 0.99999 || fabs(n1 / n0 - 1) > 1e-4)
        sp_check_add(rep, "final norm", SP_CHECK_FAIL, "the forward pass's logits differ from final norm + "
                     "LM head of its last hidden state (cosine %.6f)", same);
    else
        sp_check_add(rep, "final norm", SP_CHECK_PASS, "scale invariant: argmax %d for X, X/100 and 100X, cosine "
                     "%.7f / %.7f, magnitude ratios %.6f / %.6f as epsilon explains (|X| rms %.3g); equals the "
                     "forward pass", a1, cos_dn, cos_up, r_dn, r_up, sqrt(ms));
done:
    sp_session_free(s);
    free(h.x);
    free(h.logits);
    free(xs);
    free(xn);
    free(y1);
    free(y2);
}

/* ---- degenerate loops ------------------------------------------------------------------- */

static void check_loops(sp_model *m, const int32_t *prompt, size_t n, sp_check_report *rep)
{
    enum { GEN = 64, TAIL = 32 };
    int32_t out[GEN];
    sp_generate_stats st;
    sp_error err = {0};
    sp_session *s = NULL;
    sp_session_params sp = {.n_ctx = (int64_t)n + GEN};
    sp_generate_params gp = {.n_predict = GEN, .ignore_eos = true, .sampling = sp_sampling_default_params()};
    sp_status rc = sp_session_new(m, &sp, &s, &err);
    if (rc == SP_OK)
        rc = sp_generate(s, prompt, n, &gp, NULL, NULL, out, &st, &err);
    sp_session_free(s);
    if (rc != SP_OK) {
        sp_check_add(rep, "degenerate loops", SP_CHECK_FAIL, "greedy generation failed: %s", err.msg);
        return;
    }
    for (int p = 1; p <= 16; p++) {
        bool cyc = true;
        for (int i = GEN - TAIL + p; i < GEN && cyc; i++)
            cyc = out[i] == out[i - p];
        if (cyc) {
            sp_check_add(rep, "degenerate loops", SP_CHECK_WARN, "the last %d of %d greedy tokens repeat a "
                         "%d-token cycle (%d ...): check the prompt format, the final norm and the weights",
                         TAIL, GEN, p, out[GEN - p]);
            return;
        }
    }
    sp_check_add(rep, "degenerate loops", SP_CHECK_PASS, "no short cycle in the last %d of %d greedy tokens",
                 TAIL, GEN);
}

sp_status sp_check_run(const sp_check_inputs *in, sp_check_report *rep, sp_error *err)
{
    memset(rep, 0, sizeof *rep);
    sp_pool *pool = NULL; /* the weight scans' (NULL, on failure: one thread) */
    sp_pool_new(0, &pool, NULL);
    check_finite(in->model, "", pool, rep);
    check_scales(in->model, "", pool, rep);
    if (in->draft) {
        check_finite(in->draft, " (draft)", pool, rep);
        check_scales(in->draft, " (draft)", pool, rep);
    }
    sp_pool_free(pool);
    sp_check_device_decode(in->model, "", rep);
    if (in->draft)
        sp_check_device_decode(in->draft, " (draft)", rep);
    check_final_norm(in->model, in->prompt, in->n_prompt, rep);
    sp_check_chat_template(in, rep);
    sp_check_speculative(in, rep);
    check_loops(in->model, in->prompt, in->n_prompt, rep);
    if (rep->n == 0)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    return SP_OK;
}
