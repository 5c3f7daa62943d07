/* trace_stats.c: row summaries (see trace_stats.h). */
#include "diag/trace_stats.h"

#include <math.h>
#include <string.h>

void sp_row_stats_compute(const float *v, int64_t n, sp_row_stats *o)
{
    memset(o, 0, sizeof *o);
    o->n = n;
    uint64_t h = 0xcbf29ce484222325ull;
    double sum = 0, sq = 0;
    int64_t fin = 0;
    o->min = INFINITY;
    o->max = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], 4);
        for (int b = 0; b < 4; b++) {
            h ^= (bits >> (8 * b)) & 0xffu;
            h *= 0x100000001b3ull;
        }
        double x = v[i];
        if (isnan(x)) {
            o->nan++;
            continue;
        }
        if (isinf(x)) {
            o->inf++;
            continue;
        }
        fin++;
        sum += x;
        sq += x * x;
        o->min = x < o->min ? x : o->min;
        o->max = x > o->max ? x : o->max;
        o->amax = fabs(x) > o->amax ? fabs(x) : o->amax;
    }
    o->hash = h;
    if (fin) {
        o->mean = sum / (double)fin;
        double var = sq / (double)fin - o->mean * o->mean;
        o->std = var > 0 ? sqrt(var) : 0;
        o->l2 = sqrt(sq);
    } else {
        o->min = o->max = 0;
    }
}

static double rel(double a, double b, double scale)
{
    double d = fabs(a - b);
    if (d == 0)
        return 0;
    return scale > 0 ? d / scale : INFINITY;
}

double sp_row_stats_rel_diff(const sp_row_stats *a, const sp_row_stats *b)
{
    if (a->hash == b->hash && a->n == b->n)
        return 0;
    if (a->nan != b->nan || a->inf != b->inf || a->n != b->n)
        return INFINITY;
    double r = rel(a->l2, b->l2, b->l2);
    double m = rel(a->mean, b->mean, b->std);
    double x = rel(a->amax, b->amax, b->amax);
    r = m > r ? m : r;
    return x > r ? x : r;
}
