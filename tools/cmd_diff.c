/* cmd_diff.c: `specula diff A.jsonl B.jsonl [--tol X] [--json]`: the first record where two
 * traces differ (exact bits, or a relative difference above X), then how that difference
 * grows through the later layers at the same position. Exit 0 either way; 1 on bad files. */
#include "cli.h"
#include "commands.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void json_num(double v)
{
    if (v != v || isinf(v))
        printf("null");
    else
        printf("%.9g", v);
}

static void json_stats(const sp_trace_record *r)
{
    printf("{\"token\": %d, \"mean\": ", r->token);
    json_num(r->mean);
    printf(", \"std\": ");
    json_num(r->std);
    printf(", \"min\": ");
    json_num(r->min);
    printf(", \"max\": ");
    json_num(r->max);
    printf(", \"amax\": ");
    json_num(r->amax);
    printf(", \"l2\": ");
    json_num(r->l2);
    printf(", \"nan\": %lld, \"inf\": %lld, \"hash\": \"%016llx\"}", (long long)r->n_nan, (long long)r->n_inf,
           (unsigned long long)r->hash);
}

/* Record i of t (indices come from the report, so they are in range). */
static sp_trace_record rec(const sp_trace *t, size_t i)
{
    sp_trace_record r = {0};
    sp_trace_get(t, i, &r);
    return r;
}

static void print_json(const sp_trace *a, const sp_trace *b, const sp_trace_report *rep)
{
    sp_trace_summary sum, *d = &sum;
    sp_trace_report_summary(rep, d);
    printf("{\"records\": {\"a\": %zu, \"b\": %zu}, \"aligned\": \"%s\", \"compared\": %zu, "
           "\"first_divergence\": ", sp_trace_n_records(a), sp_trace_n_records(b),
           d->by_index ? "index" : "position", d->n_compared);
    if (!d->diverged) {
        printf("null}\n");
        return;
    }
    sp_trace_record va = rec(a, d->first.a), vb = rec(b, d->first.b), *ra = &va, *rb = &vb;
    printf("{\"model\": \"%s\", \"pass\": %lld, \"layer\": %d, \"op\": \"%s\", \"position\": %lld, "
           "\"rel_diff\": ", ra->model, (long long)ra->pass, ra->layer, ra->op, (long long)ra->position);
    json_num(d->first.rel_diff);
    printf(", \"a\": ");
    json_stats(ra);
    printf(", \"b\": ");
    json_stats(rb);
    printf("}, \"growth\": [");
    for (size_t i = 0; i < d->n_growth; i++) {
        sp_trace_match m = sp_trace_report_growth(rep, i);
        sp_trace_record g = rec(a, m.a);
        printf("%s{\"layer\": %d, \"op\": \"%s\", \"rel_diff\": ", i ? ", " : "", g.layer, g.op);
        json_num(m.rel_diff);
        printf("}");
    }
    printf("]}\n");
}

static void print_text(const sp_trace *a, const sp_trace *b, const sp_trace_report *rep)
{
    sp_trace_summary sum, *d = &sum;
    sp_trace_report_summary(rep, d);
    printf("compared %zu records (A %zu, B %zu), aligned by %s\n", d->n_compared,
           sp_trace_n_records(a), sp_trace_n_records(b),
           d->by_index ? "index" : "(model, layer, op, position)");
    if (!d->diverged) {
        printf("no divergence\n");
        return;
    }
    sp_trace_record va = rec(a, d->first.a), vb = rec(b, d->first.b), *ra = &va, *rb = &vb;
    printf("first divergence: %s pass %lld, layer %d, op %s, position %lld (relative difference %.3g)\n",
           ra->model, (long long)ra->pass, ra->layer, ra->op, (long long)ra->position, d->first.rel_diff);
    printf("  A: token %d mean %.6g std %.6g amax %.6g l2 %.6g nan %lld inf %lld hash %016llx\n", ra->token,
           ra->mean, ra->std, ra->amax, ra->l2, (long long)ra->n_nan, (long long)ra->n_inf,
           (unsigned long long)ra->hash);
    printf("  B: token %d mean %.6g std %.6g amax %.6g l2 %.6g nan %lld inf %lld hash %016llx\n", rb->token,
           rb->mean, rb->std, rb->amax, rb->l2, (long long)rb->n_nan, (long long)rb->n_inf,
           (unsigned long long)rb->hash);
    if (d->n_growth)
        printf("  %6s  %-20s %12s %14s %14s\n", "layer", "op", "rel diff", "l2 A", "l2 B");
    for (size_t i = 0; i < d->n_growth; i++) {
        sp_trace_match m = sp_trace_report_growth(rep, i);
        sp_trace_record ga = rec(a, m.a), gb = rec(b, m.b);
        printf("  %6d  %-20s %12.3g %14.6g %14.6g\n", ga.layer, ga.op, m.rel_diff, ga.l2, gb.l2);
    }
}

int cmd_diff(int argc, char **argv)
{
    double tol = 0;
    bool json = false;
    cli_opt opts[] = {
        {"--tol", NULL, CLI_FLOAT, &tol, "relative difference that counts (default 0: exact bits)", 0},
        {"--json", NULL, CLI_FLAG, &json, "print one JSON object", 0},
        {0},
    };
    const char *usage = "specula diff A.jsonl B.jsonl [--tol X] [--json]";
    /* the two files are positional, anywhere among the options */
    char *rest[64], *files[2];
    int n_rest = 0, n_files = 0;
    rest[n_rest++] = argv[0];
    for (int i = 1; i < argc && n_rest < 62; i++) {
        if (argv[i][0] == '-') {
            rest[n_rest++] = argv[i];
            if (!strcmp(argv[i], "--tol") && i + 1 < argc)
                rest[n_rest++] = argv[++i];
        } else if (n_files < 2) {
            files[n_files++] = argv[i];
        } else {
            n_files = 3;
        }
    }
    int rc = cli_parse(n_rest, rest, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (n_files != 2) {
        fprintf(stderr, "specula: diff needs two trace files\nusage: %s\n", usage);
        return CLI_USAGE;
    }
    const char *pa = files[0], *pb = files[1];
    if (!(tol >= 0))
        return cli_failf("--tol must be >= 0");
    sp_error err = {0};
    sp_trace *a, *b;
    if (sp_trace_open(pa, &a, &err) != SP_OK)
        return cli_fail(&err);
    if (sp_trace_open(pb, &b, &err) != SP_OK) {
        sp_trace_close(a);
        return cli_fail(&err);
    }
    sp_trace_report *d;
    if (sp_trace_compare(a, b, tol, &d, &err) != SP_OK)
        rc = cli_fail(&err);
    else if (json)
        print_json(a, b, d);
    else
        print_text(a, b, d);
    sp_trace_report_free(d);
    sp_trace_close(a);
    sp_trace_close(b);
    return rc;
}
