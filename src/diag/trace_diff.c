/* trace_diff.c: reading and comparing traces (see trace_diff.h). */
#include "diag/trace_diff.h"
#include "util/error.h"
#include "util/strmap.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_LINE (1u << 20)

static double field_num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : cJSON_IsNull(v) ? NAN : 0.0;
}

/* An integer field: a JSON number that is whole and within [lo, hi] (a cast of an
 * out-of-range double is undefined behaviour). Absent fields read as 0. */
static bool field_int(const cJSON *o, const char *k, double lo, double hi, int64_t *out)
{
    double v = field_num(o, k);
    if (!(v >= lo && v <= hi) || v != floor(v))
        return false;
    *out = (int64_t)v;
    return true;
}

static sp_status parse_line(const char *line, size_t len, const char *path, size_t lineno,
                            sp_trace_rec *r, sp_error *err)
{
    cJSON *o = cJSON_ParseWithLength(line, len);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "op");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(o, "hash");
    const char *need[] = {"pass", "layer", "position", "width"};
    bool ok = cJSON_IsObject(o) && cJSON_IsString(model) && cJSON_IsString(op) && cJSON_IsString(hash);
    for (size_t i = 0; ok && i < sizeof need / sizeof need[0]; i++)
        ok = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, need[i]));
    if (!ok) {
        cJSON_Delete(o);
        return sp_err(err, SP_ERR_FORMAT, "%s: line %zu is not a specula trace record (needs model, "
                      "pass, layer, op, position, width and hash)", path, lineno);
    }
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "%s", model->valuestring);
    snprintf(r->op, sizeof r->op, "%s", op->valuestring);
    /* integers must be whole and in range; 2^53 bounds what a double holds exactly */
    const double big = 9007199254740992.0;
    int64_t layer = 0, token = 0;
    const char *bad = !field_int(o, "pass", 0, big, &r->pass)              ? "pass"
                      : !field_int(o, "layer", -1, INT32_MAX, &layer)       ? "layer"
                      : !field_int(o, "position", 0, big, &r->position)     ? "position"
                      : !field_int(o, "token", INT32_MIN, INT32_MAX, &token) ? "token"
                      : !field_int(o, "width", 0, big, &r->s.n)             ? "width"
                      : !field_int(o, "nan", 0, big, &r->s.nan)             ? "nan"
                      : !field_int(o, "inf", 0, big, &r->s.inf)             ? "inf"
                                                                            : NULL;
    if (bad) {
        cJSON_Delete(o);
        return sp_err(err, SP_ERR_FORMAT, "%s: line %zu: field '%s' is not an integer in range", path,
                      lineno, bad);
    }
    r->layer = (int)layer;
    r->token = (int32_t)token;
    r->s.mean = field_num(o, "mean");
    r->s.std = field_num(o, "std");
    r->s.min = field_num(o, "min");
    r->s.max = field_num(o, "max");
    r->s.amax = field_num(o, "amax");
    r->s.l2 = field_num(o, "l2");
    r->s.hash = strtoull(hash->valuestring, NULL, 16);
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(o, "ctx");
    r->ctx = cJSON_IsString(ctx) ? strtoull(ctx->valuestring, NULL, 16) : 0;
    cJSON_Delete(o);
    return SP_OK;
}

sp_status sp_trace_read(const char *path, sp_trace_file *out, sp_error *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f)
        return sp_err(err, SP_ERR_IO, "cannot open trace '%s'", path);
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return sp_err(err, SP_ERR_IO, "trace '%s' is not a regular file", path);
    }
    sp_status st = sp_trace_read_stream(f, path, out, err);
    fclose(f);
    if (st == SP_OK && out->n == 0)
        return sp_err(err, SP_ERR_FORMAT, "trace '%s' holds no records", path);
    return st;
}

sp_status sp_trace_read_stream(FILE *f, const char *path, sp_trace_file *out, sp_error *err)
{
    memset(out, 0, sizeof *out);
    char *line = NULL;
    size_t cap = 0, n_cap = 0, lineno = 0;
    ssize_t len;
    sp_status st = SP_OK;
    while (st == SP_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len == 0 || (len == 1 && line[0] == '\n'))
            continue;
        if ((size_t)len > MAX_LINE) {
            st = sp_err(err, SP_ERR_FORMAT, "%s: line %zu is longer than %u bytes", path, lineno, MAX_LINE);
            break;
        }
        if (out->n == n_cap) {
            size_t nc = n_cap ? 2 * n_cap : 1024;
            sp_trace_rec *p = realloc(out->r, nc * sizeof *p);
            if (!p) {
                st = sp_err(err, SP_ERR_NOMEM, "out of memory reading '%s'", path);
                break;
            }
            out->r = p;
            n_cap = nc;
        }
        st = parse_line(line, (size_t)len, path, lineno, &out->r[out->n], err);
        if (st == SP_OK)
            out->n++;
    }
    free(line);
    if (st == SP_OK && ferror(f))
        st = sp_err(err, SP_ERR_IO, "%s: read error after line %zu", path, lineno);
    if (st != SP_OK)
        sp_trace_file_free(out);
    return st;
}

void sp_trace_file_free(sp_trace_file *f)
{
    free(f->r);
    memset(f, 0, sizeof *f);
}

static bool same_key(const sp_trace_rec *a, const sp_trace_rec *b, bool with_pass)
{
    return a->layer == b->layer && a->position == b->position && (!with_pass || a->pass == b->pass) &&
           !strcmp(a->model, b->model) && !strcmp(a->op, b->op);
}

static double differs(const sp_trace_rec *a, const sp_trace_rec *b, double tol)
{
    if (tol <= 0)
        return a->s.hash != b->s.hash || a->s.n != b->s.n ? sp_row_stats_rel_diff(&a->s, &b->s) + 1e-300 : 0;
    double r = sp_row_stats_rel_diff(&a->s, &b->s);
    return r > tol ? r : 0;
}

/* (model, layer, op, position, context) as a string key. */
static size_t key_of(const sp_trace_rec *r, char *buf, size_t n)
{
    return (size_t)snprintf(buf, n, "%s|%d|%s|%lld|%llx", r->model, r->layer, r->op, (long long)r->position,
                            (unsigned long long)r->ctx);
}

/* Index in b matching a[i], or -1. */
typedef struct matcher {
    bool by_index;
    sp_strmap map;
    char *keys; /* storage of b's keys, 128 bytes each */
} matcher;

static int64_t match(const matcher *mt, const sp_trace_file *a, const sp_trace_file *b, size_t i)
{
    if (mt->by_index)
        return (int64_t)i;
    char k[128];
    size_t n = key_of(&a->r[i], k, sizeof k);
    int64_t j;
    (void)b;
    return sp_strmap_get(&mt->map, k, n, &j) ? j : -1;
}

static sp_status build_matcher(matcher *mt, const sp_trace_file *a, const sp_trace_file *b, sp_error *err)
{
    memset(mt, 0, sizeof *mt);
    mt->by_index = a->n == b->n;
    for (size_t i = 0; mt->by_index && i < a->n; i++)
        mt->by_index = same_key(&a->r[i], &b->r[i], true);
    if (mt->by_index)
        return SP_OK;
    mt->keys = malloc((b->n ? b->n : 1) * 128);
    if (!mt->keys || !sp_strmap_init(&mt->map, b->n))
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    for (size_t j = 0; j < b->n; j++) {
        char *k = mt->keys + j * 128;
        size_t n = key_of(&b->r[j], k, 128);
        if (sp_strmap_put(&mt->map, k, n, (int64_t)j) < 0)
            return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    return SP_OK;
}

static void growth(const sp_trace_file *a, const sp_trace_file *b, const matcher *mt, double tol,
                   sp_trace_diff *d)
{
    const sp_trace_rec *f = &a->r[d->first.ia];
    d->growth = malloc(a->n * sizeof *d->growth);
    if (!d->growth)
        return;
    for (size_t i = d->first.ia + 1; i < a->n; i++) {
        const sp_trace_rec *r = &a->r[i];
        if (strcmp(r->model, f->model) || r->position != f->position || (mt->by_index && r->pass != f->pass))
            continue;
        if (strcmp(r->op, f->op) && strcmp(r->op, "mlp_residual") && strcmp(r->op, "logits"))
            continue;
        int64_t j = match(mt, a, b, i);
        if (j < 0)
            continue;
        double rel = sp_row_stats_rel_diff(&r->s, &b->r[j].s);
        (void)tol;
        d->growth[d->n_growth++] = (sp_trace_step){i, (size_t)j, rel};
    }
}

sp_status sp_trace_diff_run(const sp_trace_file *a, const sp_trace_file *b, double tol,
                            sp_trace_diff *d, sp_error *err)
{
    memset(d, 0, sizeof *d);
    matcher mt;
    sp_status st = build_matcher(&mt, a, b, err);
    d->by_index = mt.by_index;
    for (size_t i = 0; st == SP_OK && i < a->n && !d->found; i++) {
        int64_t j = match(&mt, a, b, i);
        if (j < 0 || (size_t)j >= b->n)
            continue;
        d->matched++;
        double r = differs(&a->r[i], &b->r[j], tol);
        if (r > 0) {
            d->found = true;
            d->first = (sp_trace_step){i, (size_t)j, sp_row_stats_rel_diff(&a->r[i].s, &b->r[j].s)};
            growth(a, b, &mt, tol, d);
        }
    }
    if (!mt.by_index) {
        sp_strmap_fini(&mt.map);
        free(mt.keys);
    }
    return st;
}

void sp_trace_diff_free(sp_trace_diff *d)
{
    free(d->growth);
    memset(d, 0, sizeof *d);
}
