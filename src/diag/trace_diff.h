/* trace_diff.h: reading JSON-lines traces and finding where two runs part ways.
 *
 * Two traces of the same computation have the same records in the same order: they are
 * walked by index. Otherwise (a prefill against token-by-token decoding, a speculative run
 * against a plain one) records are matched by (model, layer, op, position, context), first
 * occurrence each: the same op at the same position computed on the same tokens. A record differs when its hash differs (exact mode) or, with a
 * tolerance, when sp_row_stats_rel_diff exceeds it. After the first divergence, the growth
 * table follows the same model and position through the later layers (the diverging op,
 * each layer's output and the logits). */
#ifndef SP_DIAG_TRACE_DIFF_H
#define SP_DIAG_TRACE_DIFF_H

#include "diag/trace_stats.h"
#include "specula.h"

#include <stddef.h>
#include <stdio.h>

typedef struct sp_trace_rec {
    char model[16];
    char op[32];
    int64_t pass, position;
    int layer;
    int32_t token;
    uint64_t ctx; /* hash of the tokens at positions 0..position (0 when absent) */
    sp_row_stats s;
} sp_trace_rec;

typedef struct sp_trace_file {
    sp_trace_rec *r;
    size_t n;
} sp_trace_file;

sp_status sp_trace_read(const char *path, sp_trace_file *out, sp_error *err);
/* From an open stream (read from its current position); `path` names it in messages. */
sp_status sp_trace_read_stream(FILE *f, const char *path, sp_trace_file *out, sp_error *err);
void sp_trace_file_free(sp_trace_file *f);

typedef struct sp_trace_step {
    size_t ia, ib;
    double rel;
} sp_trace_step;

typedef struct sp_trace_diff {
    bool by_index;        /* aligned by index (else by key) */
    size_t matched;       /* records compared */
    bool found;
    sp_trace_step first;  /* the first divergence */
    sp_trace_step *growth;
    size_t n_growth;
} sp_trace_diff;

/* tol = 0: exact (hashes). */
sp_status sp_trace_diff_run(const sp_trace_file *a, const sp_trace_file *b, double tol,
                            sp_trace_diff *out, sp_error *err);
void sp_trace_diff_free(sp_trace_diff *d);

#endif
