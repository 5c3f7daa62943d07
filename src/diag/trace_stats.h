/* trace_stats.h: the summary of one activation row that traces record: mean, standard
 * deviation, min, max, largest magnitude and L2 norm over the finite values (in double,
 * in index order), counts of NaN and Inf, and a 64-bit FNV-1a hash of the exact float
 * bits, so two runs agree on a row exactly when their hashes do. */
#ifndef SP_DIAG_TRACE_STATS_H
#define SP_DIAG_TRACE_STATS_H

#include <stdint.h>

typedef struct sp_row_stats {
    int64_t n;
    double mean, std, min, max, amax, l2;
    int64_t nan, inf;
    uint64_t hash;
} sp_row_stats;

void sp_row_stats_compute(const float *v, int64_t n, sp_row_stats *out);

/* Relative difference of two summaries: the largest of |dL2| / L2, |dmean| / std and
 * |damax| / amax (b is the reference); 0 when both hashes agree, inf when NaN/Inf counts
 * differ. */
double sp_row_stats_rel_diff(const sp_row_stats *a, const sp_row_stats *b);

#endif
