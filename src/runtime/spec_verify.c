/* spec_verify.c: the acceptance rule (see spec_verify.h). */
#include "runtime/spec_verify.h"

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

bool sp_spec_verify_token(const double *p, int64_t n_p, const double *q, int64_t n_q, int32_t d,
                          sp_rng *accept_rng, sp_rng *resample_rng, int32_t *out)
{
    double pd = at(p, n_p, d), qd = q ? at(q, n_q, d) : 1.0;
    double u = sp_rng_uniform(accept_rng);
    /* accept with min(1, p/q): u < p/q, written without dividing by a zero q */
    if (qd > 0 && u * qd < pd)
        return true;
    int64_t n = n_p > n_q ? n_p : n_q;
    double total = 0;
    for (int64_t i = 0; i < n; i++)
        total += residual(p, n_p, q, n_q, d, i);
    double v = sp_rng_uniform(resample_rng);
    if (!(total > 0)) { /* only through rounding (p == q on the support): draw from p */
        *out = sp_sample_probs(p, n_p, v);
        return false;
    }
    double target = v * total, c = 0;
    int64_t last = -1;
    for (int64_t i = 0; i < n; i++) {
        double r = residual(p, n_p, q, n_q, d, i);
        if (r <= 0)
            continue;
        c += r;
        last = i;
        if (target < c) {
            *out = (int32_t)i;
            return false;
        }
    }
    *out = (int32_t)last;
    return false;
}
