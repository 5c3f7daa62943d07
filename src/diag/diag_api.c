/* diag_api.c: the public diagnostics of specula.h over the internals of src/diag/: trace
 * files and their comparison behind opaque handles (sp_trace, sp_trace_report), the
 * checkpoint self-tests as sp_check_results, perturbation by op name. Thin wrappers: the
 * work is done by trace_writer.c, trace_diff.c and check.c. */
#include "diag/check.h"
#include "diag/trace_diff.h"
#include "diag/trace_writer.h"
#include "util/error.h"

#include <stdlib.h>

/* ---- trace writing ------------------------------------------------------------------- */

bool sp_trace_op_valid(const char *op) { return op && sp_op_from_name(op) != SP_OP_COUNT; }

sp_status sp_trace_writer_set_perturb(sp_trace_writer *w, int layer, const char *op,
                                      float factor, sp_error *err)
{
    if (!sp_trace_op_valid(op))
        return sp_err(err, SP_ERR_INVALID_ARG, "perturb: unknown op '%s'", op ? op : "(null)");
    sp_trace_writer_perturb(w, layer, sp_op_from_name(op), factor);
    return SP_OK;
}

/* ---- trace reading and comparison ------------------------------------------------------ */

struct sp_trace {
    sp_trace_file f;
};

struct sp_trace_report {
    sp_trace_diff d;
};

sp_status sp_trace_open(const char *path, sp_trace **out, sp_error *err)
{
    *out = NULL;
    sp_trace *t = calloc(1, sizeof *t);
    if (!t)
        return sp_err(err, SP_ERR_NOMEM, "%s: out of memory", path);
    sp_status st = sp_trace_read(path, &t->f, err);
    if (st != SP_OK) {
        free(t);
        return st;
    }
    *out = t;
    return SP_OK;
}

void sp_trace_close(sp_trace *t)
{
    if (!t)
        return;
    sp_trace_file_free(&t->f);
    free(t);
}

size_t sp_trace_n_records(const sp_trace *t) { return t->f.n; }

bool sp_trace_get(const sp_trace *t, size_t i, sp_trace_record *out)
{
    if (i >= t->f.n)
        return false;
    const sp_trace_rec *r = &t->f.r[i];
    *out = (sp_trace_record){
        .model = r->model, .op = r->op, .pass = r->pass, .position = r->position,
        .layer = r->layer, .token = r->token, .mean = r->s.mean, .std = r->s.std,
        .min = r->s.min, .max = r->s.max, .amax = r->s.amax, .l2 = r->s.l2,
        .n_nan = r->s.nan, .n_inf = r->s.inf, .hash = r->s.hash,
    };
    return true;
}

sp_status sp_trace_compare(const sp_trace *a, const sp_trace *b, double tol,
                           sp_trace_report **out, sp_error *err)
{
    *out = NULL;
    sp_trace_report *r = calloc(1, sizeof *r);
    if (!r)
        return sp_err(err, SP_ERR_NOMEM, "trace diff: out of memory");
    sp_status st = sp_trace_diff_run(&a->f, &b->f, tol, &r->d, err);
    if (st != SP_OK) {
        sp_trace_diff_free(&r->d);
        free(r);
        return st;
    }
    *out = r;
    return SP_OK;
}

void sp_trace_report_free(sp_trace_report *r)
{
    if (!r)
        return;
    sp_trace_diff_free(&r->d);
    free(r);
}

void sp_trace_report_summary(const sp_trace_report *r, sp_trace_summary *out)
{
    *out = (sp_trace_summary){
        .by_index = r->d.by_index, .n_compared = r->d.matched, .diverged = r->d.found,
        .first = {r->d.first.ia, r->d.first.ib, r->d.first.rel}, .n_growth = r->d.n_growth,
    };
}

sp_trace_match sp_trace_report_growth(const sp_trace_report *r, size_t i)
{
    const sp_trace_step *g = &r->d.growth[i];
    return (sp_trace_match){g->ia, g->ib, g->rel};
}

/* ---- checks ------------------------------------------------------------------------- */

struct sp_check_results {
    sp_check_report rep;
};

sp_status sp_check_model(const sp_check_inputs *in, sp_check_results **out, sp_error *err)
{
    *out = NULL;
    sp_check_results *r = calloc(1, sizeof *r);
    if (!r)
        return sp_err(err, SP_ERR_NOMEM, "check: out of memory");
    sp_status st = sp_check_run(in, &r->rep, err);
    if (st != SP_OK) {
        sp_check_report_free(&r->rep);
        free(r);
        return st;
    }
    *out = r;
    return SP_OK;
}

void sp_check_results_free(sp_check_results *r)
{
    if (!r)
        return;
    sp_check_report_free(&r->rep);
    free(r);
}

size_t sp_check_results_count(const sp_check_results *r) { return r->rep.n; }

sp_check_status sp_check_results_get(const sp_check_results *r, size_t i, const char **name,
                                     const char **detail)
{
    const sp_check_result *c = &r->rep.r[i];
    if (name)
        *name = c->name;
    if (detail)
        *detail = c->detail;
    return c->status;
}
