/* spec_verify.c: the acceptance rule (see spec_verify.h). */
#include "runtime/spec_verify.h"

#include <stdlib.h>

static double at(const double *v, int64_t n, int64_t i)
{
    return v && i >= 0 && i < n ? v[i] : 0.0;
}

/* max(0, p - q) at i, with q one-hot at d when q is NULL. */
static double residual(const double *p, int64_t n_p, const double *q, int64_t n_q, int32_t d,
                       int64_t i)
{
    double qi = q ? at(q, n_q, i) : (i == d ? 1.0 : 0.0);
    double r = at(p, n_p, i) - qi;
    return r > 0 ? r : 0.0;
}

/* The residual's draw in sample_row.h's order (lane sums of ids c, c + L, ... ascending;
 * groups; total; x = u * total; the three-level walk), each value computed where it is
 * added: the CUDA kernel's order (kernels/cuda/cuda_spec_verify.cu). -1 when the
 * residual sums to no more than 0. */
static int32_t residual_draw(const double *p, int64_t n_p, const double *q, int64_t n_q, int32_t d,
                             int64_t n, double u)
{
    double lane[SP_SAMPLE_LANES] = {0}, group[SP_SAMPLE_GROUPS];
    for (int64_t i = 0; i < n; i++)
        lane[i % SP_SAMPLE_LANES] = lane[i % SP_SAMPLE_LANES] + residual(p, n_p, q, n_q, d, i);
    const double total = sp_sample_groups(lane, group);
    if (!(total > 0.0))
        return -1;
    const double x = u * total;
    double acc = 0.0;
    const int64_t g = sp_sample_walk(group, SP_SAMPLE_GROUPS, 1, x, 0.0, &acc);
    const int64_t c = g * SP_SAMPLE_GROUP +
                      sp_sample_walk(lane + g * SP_SAMPLE_GROUP, SP_SAMPLE_GROUP, 1, x, acc, &acc);
    int64_t last = -1;
    for (int64_t i = c; i < n; i += SP_SAMPLE_LANES) {
        const double r = residual(p, n_p, q, n_q, d, i);
        if (!(r > 0.0))
            continue;
        const double next = acc + r;
        if (x < next)
            return (int32_t)i;
        last = i;
        acc = next;
    }
    return (int32_t)last;
}

/* Whether d is accepted with uniform u: min(1, p/q) as u < p/q, written without dividing by
 * a zero q. */
static bool accepts(const double *p, int64_t n_p, const double *q, int64_t n_q, int32_t d, double u)
{
    double pd = at(p, n_p, d), qd = q ? at(q, n_q, d) : 1.0;
    return qd > 0 && u * qd < pd;
}

/* The replacement of a rejected d, drawn with uniform v. */
static int32_t replacement(const double *p, int64_t n_p, const double *q, int64_t n_q, int32_t d,
                           double v)
{
    const int32_t r = residual_draw(p, n_p, q, n_q, d, n_p > n_q ? n_p : n_q, v);
    if (r >= 0)
        return r;
    /* no residual mass only through rounding (p == q on the support): draw from p */
    const int32_t t = sp_sample_values(p, n_p, v);
    return t >= 0 ? t : 0; /* p itself empty (not a distribution): its first id */
}

bool sp_spec_verify_token(const double *p, int64_t n_p, const double *q, int64_t n_q, int32_t d,
                          sp_rng *accept_rng, sp_rng *resample_rng, int32_t *out)
{
    if (accepts(p, n_p, q, n_q, d, sp_rng_uniform(accept_rng)))
        return true;
    *out = replacement(p, n_p, q, n_q, d, sp_rng_uniform(resample_rng));
    return false;
}

void sp_spec_peek(const sp_rng *accept, const sp_rng *resample, int32_t m, double *u, double *v)
{
    sp_rng a = *accept, b = *resample;
    for (int32_t i = 0; i < m; i++)
        u[i] = sp_rng_uniform(&a);
    *v = sp_rng_uniform(&b);
}

void sp_spec_took(sp_rng *accept, sp_rng *resample, int32_t accepted, int32_t m)
{
    for (int32_t i = 0; i < (accepted < m ? accepted + 1 : m); i++)
        (void)sp_rng_uniform(accept);
    if (accepted < m)
        (void)sp_rng_uniform(resample);
}

sp_status sp_spec_verify_rows(const float *target, const float *draft, int64_t m, int64_t V,
                              const sp_sample_req *reqs, const sp_spec_args *a, int32_t out[2])
{
    const bool onehot = !draft;
    out[0] = out[1] = -1;
    sp_sample_work wk;
    double *p = malloc((size_t)V * sizeof *p), *q = malloc((size_t)V * sizeof *q);
    sp_status st = p && q ? sp_sample_work_init(&wk, V) : SP_ERR_NOMEM;
    if (st != SP_OK) {
        free(p);
        free(q);
        return st;
    }
    int64_t i = 0;
    for (; i < m; i++) {
        const int32_t d = a->drafts[i];
        if (!sp_sample_dist_row(&reqs[i], target + i * V, V, &wk, p) ||
            (!onehot && !sp_sample_dist_row(&reqs[m + 1 + i], draft + i * V, V, &wk, q)))
            break; /* a row without candidates: the host's sampler decides */
        if (accepts(p, V, onehot ? NULL : q, V, d, a->u[i]))
            continue;
        out[0] = (int32_t)i;
        out[1] = replacement(p, V, onehot ? NULL : q, V, d, a->v);
        break;
    }
    if (i == m) {
        sp_sample_req r = reqs[m];
        r.u = a->v_bonus;
        out[0] = (int32_t)m;
        out[1] = sp_sample_row(&r, target + m * V, V, &wk);
    }
    sp_sample_work_free(&wk);
    free(p);
    free(q);
    return SP_OK;
}
