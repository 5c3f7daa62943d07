/* trace_writer.c: JSON-lines traces of forward passes (see trace_writer.h). */
#include "diag/trace_writer.h"
#include "diag/trace_stats.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sp_trace_writer {
    FILE *f;
    uint64_t *prefix; /* prefix[p]: hash of the tokens at positions 0..p as last evaluated */
    int64_t n_prefix;
    char label[32];
    int64_t pass, lines;
    bool failed;
    bool perturb;
    int perturb_layer;
    sp_op perturb_op;
    float perturb_factor;
    sp_session *attached[4]; /* sessions a perturbation applies to */
    int n_attached;
    double *res_rms;         /* [n_res] each layer's output rms at the latest position */
    int64_t n_res;
    double final_rms;        /* model.norm's output rms there */
    uint64_t *experts;       /* [n_exp * EXP_WORDS]: each layer's expert ids in the latest pass */
    int64_t n_exp;
};

#define EXP_WORDS 16 /* expert ids < 1024 (the routing kernels' limit) */

sp_status sp_trace_writer_new(FILE *f, const char *label, sp_trace_writer **out, sp_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    (*out)->f = f;
    (*out)->pass = -1;
    snprintf((*out)->label, sizeof (*out)->label, "%s", label);
    return SP_OK;
}

void sp_trace_writer_free(sp_trace_writer *w)
{
    if (w) {
        free(w->prefix);
        free(w->res_rms);
        free(w->experts);
    }
    free(w);
}

/* Records the tokens of a pass: the context hash of every position it covers. */
static void note_tokens(sp_trace_writer *w, const sp_trace_event *ev)
{
    int64_t end = ev->pos0 + ev->n_tok;
    if (end > w->n_prefix) {
        int64_t cap = end > 2 * w->n_prefix ? end : 2 * w->n_prefix;
        uint64_t *p = realloc(w->prefix, (size_t)cap * sizeof *p);
        if (!p) {
            w->failed = true;
            return;
        }
        w->prefix = p;
        w->n_prefix = cap;
    }
    for (int64_t i = 0; i < ev->n_tok; i++) {
        int64_t pos = ev->pos0 + i;
        uint64_t h = pos ? w->prefix[pos - 1] : 0xcbf29ce484222325ull;
        w->prefix[pos] = (h ^ (uint64_t)(uint32_t)(ev->tokens ? ev->tokens[i] : -1)) * 0x100000001b3ull;
    }
}

void sp_trace_writer_perturb(sp_trace_writer *w, int layer, sp_op op, float factor)
{
    w->perturb = true;
    w->perturb_layer = layer;
    w->perturb_op = op;
    w->perturb_factor = factor;
    for (int i = 0; i < w->n_attached; i++)
        sp_session_set_perturb(w->attached[i], layer, op, factor);
}

int64_t sp_trace_writer_lines(const sp_trace_writer *w) { return w->lines; }
bool sp_trace_writer_failed(const sp_trace_writer *w) { return w->failed; }

/* %.9g keeps a float's value; JSON has no inf/nan, so those print as null. */
static void num(FILE *f, const char *key, double v)
{
    if (v != v || v > 1e308 || v < -1e308)
        fprintf(f, ", \"%s\": null", key);
    else
        fprintf(f, ", \"%s\": %.9g", key, v);
}

/* The residual magnitude at the event's last position: each layer's output, and what the
 * final norm makes of the last one. */
static void note_residual(sp_trace_writer *w, const sp_trace_event *ev, const sp_row_stats *last)
{
    double rms = last->l2 / sqrt((double)(ev->width > 0 ? ev->width : 1));
    if (ev->op == SP_OP_FINAL_NORM) {
        w->final_rms = rms;
        return;
    }
    if (ev->op != SP_OP_MLP_RESIDUAL || ev->layer < 0)
        return;
    if (ev->layer >= w->n_res) {
        int64_t n = (int64_t)ev->layer + 1;
        double *p = realloc(w->res_rms, (size_t)n * sizeof *p);
        if (!p) {
            w->failed = true;
            return;
        }
        for (int64_t i = w->n_res; i < n; i++)
            p[i] = 0;
        w->res_rms = p;
        w->n_res = n;
    }
    w->res_rms[ev->layer] = rms;
}

size_t sp_trace_writer_residuals(const sp_trace_writer *w, double *rms, size_t cap, double *final_rms)
{
    for (size_t i = 0; i < cap && i < (size_t)w->n_res; i++)
        rms[i] = w->res_rms[i];
    if (final_rms)
        *final_rms = w->final_rms;
    return (size_t)w->n_res;
}

/* The expert ids a moe_experts event lists (k ids, then k weights, a position) into its
 * layer's set. */
static void note_experts(sp_trace_writer *w, const sp_trace_event *ev)
{
    if (ev->layer < 0)
        return;
    if (ev->layer >= w->n_exp) {
        int64_t n = (int64_t)ev->layer + 1;
        uint64_t *p = realloc(w->experts, (size_t)(n * EXP_WORDS) * sizeof *p);
        if (!p) {
            w->failed = true;
            return;
        }
        memset(p + w->n_exp * EXP_WORDS, 0, (size_t)((n - w->n_exp) * EXP_WORDS) * sizeof *p);
        w->experts = p;
        w->n_exp = n;
    }
    uint64_t *set = w->experts + (int64_t)ev->layer * EXP_WORDS;
    const int64_t k = ev->width / 2;
    for (int64_t t = 0; t < ev->n_tok; t++)
        for (int64_t j = 0; j < k; j++) {
            const float id = ev->data[t * ev->width + j];
            if (id >= 0 && id < 64 * EXP_WORDS)
                set[(int64_t)id / 64] |= 1ull << ((int64_t)id % 64);
        }
}

size_t sp_trace_writer_experts(const sp_trace_writer *w, int32_t *distinct, size_t cap)
{
    for (size_t i = 0; i < cap && i < (size_t)w->n_exp; i++) {
        int32_t n = 0;
        for (int j = 0; j < EXP_WORDS; j++)
            n += __builtin_popcountll(w->experts[i * EXP_WORDS + j]);
        distinct[i] = n;
    }
    return (size_t)w->n_exp;
}

static void on_event(void *ctx, const sp_trace_event *ev)
{
    sp_trace_writer *w = ctx;
    if (ev->op == SP_OP_EMBED) {
        w->pass++;
        note_tokens(w, ev);
        if (w->experts) /* a new pass: its own experts */
            memset(w->experts, 0, (size_t)(w->n_exp * EXP_WORDS) * sizeof *w->experts);
    }
    if (ev->op == SP_OP_MOE_EXPERTS)
        note_experts(w, ev);
    for (int64_t t = 0; t < ev->n_tok; t++) {
        sp_row_stats s;
        sp_row_stats_compute(ev->data + t * ev->width, ev->width, &s);
        if (t == ev->n_tok - 1)
            note_residual(w, ev, &s);
        fprintf(w->f, "{\"model\": \"%s\", \"pass\": %lld, \"layer\": %d, \"op\": \"%s\", "
                      "\"position\": %lld, \"token\": %d, \"width\": %lld",
                w->label, (long long)w->pass, ev->layer, sp_op_name(ev->op),
                (long long)(ev->pos0 + t), ev->tokens ? ev->tokens[t] : -1, (long long)ev->width);
        num(w->f, "mean", s.mean);
        num(w->f, "std", s.std);
        num(w->f, "min", s.min);
        num(w->f, "max", s.max);
        num(w->f, "amax", s.amax);
        num(w->f, "l2", s.l2);
        int64_t pos = ev->pos0 + t;
        uint64_t ctxh = w->prefix && pos < w->n_prefix ? w->prefix[pos] : 0;
        if (fprintf(w->f, ", \"nan\": %lld, \"inf\": %lld, \"hash\": \"%016llx\", \"ctx\": \"%016llx\"}\n",
                    (long long)s.nan, (long long)s.inf, (unsigned long long)s.hash,
                    (unsigned long long)ctxh) < 0)
            w->failed = true;
        w->lines++;
    }
}

void sp_trace_writer_attach(sp_trace_writer *w, sp_session *s)
{
    sp_session_set_trace(s, on_event, w);
    if (w->n_attached < (int)(sizeof w->attached / sizeof w->attached[0]))
        w->attached[w->n_attached++] = s;
    if (w->perturb)
        sp_session_set_perturb(s, w->perturb_layer, w->perturb_op, w->perturb_factor);
}
