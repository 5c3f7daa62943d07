/* cli.c: option parsing and reporting shared by the subcommands (see cli.h). */
#include "cli.h"
#include "util/fileio.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_print_help(const char *usage, const cli_opt *opts)
{
    printf("usage: %s\n\noptions:\n", usage);
    for (const cli_opt *o = opts; o->name; o++)
        printf("  %s%s%-22s %s\n", o->alias ? o->alias : "", o->alias ? ", " : "  ", o->name,
               o->help);
    printf("  %-26s %s\n", "--help", "show this help");
}

static int set_value(cli_opt *o, const char *v)
{
    char *end;
    errno = 0;
    switch (o->kind) {
    case CLI_STR: *(const char **)o->dst = v; return 0;
    case CLI_INT: {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end)
            return -1;
        *(int64_t *)o->dst = x;
        return 0;
    }
    case CLI_U64: {
        if (*v == '-')
            return -1;
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end)
            return -1;
        *(uint64_t *)o->dst = x;
        return 0;
    }
    case CLI_FLOAT: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x))
            return -1;
        *(double *)o->dst = x;
        return 0;
    }
    case CLI_FLAG: return -1;
    }
    return -1;
}

int cli_parse(int argc, char **argv, cli_opt *opts, const char *usage)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cli_print_help(usage, opts);
            return -1;
        }
        cli_opt *o = NULL;
        for (cli_opt *c = opts; c->name; c++)
            if (strcmp(a, c->name) == 0 || (c->alias && strcmp(a, c->alias) == 0))
                o = c;
        if (!o) {
            fprintf(stderr, "specula: unknown option '%s'\nusage: %s\n", a, usage);
            return CLI_USAGE;
        }
        o->seen = true;
        if (o->kind == CLI_FLAG) {
            *(bool *)o->dst = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "specula: option '%s' needs a value\n", a);
            return CLI_USAGE;
        }
        if (set_value(o, argv[++i]) != 0) {
            fprintf(stderr, "specula: option '%s': invalid value '%s'\n", a, argv[i]);
            return CLI_USAGE;
        }
    }
    return 0;
}

int cli_parse_tokens(const char *s, int32_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t cap = 16, cnt = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return -1;
    const char *p = s;
    while (*p == ' ' || *p == '[')
        p++;
    while (*p && *p != ']') {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < INT32_MIN || x > INT32_MAX) {
            free(v);
            return -1;
        }
        if (cnt == cap) {
            int32_t *g = realloc(v, (cap *= 2) * sizeof *v);
            if (!g) {
                free(v);
                return -1;
            }
            v = g;
        }
        v[cnt++] = (int32_t)x;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ',') {
            p++;
            while (*p == ' ')
                p++;
            if (!*p || *p == ']') {
                free(v);
                return -1;
            }
        } else if (*p && *p != ']') {
            free(v);
            return -1;
        }
    }
    *out = v;
    *n = cnt;
    return 0;
}

int cli_fail(const sp_error *err)
{
    fprintf(stderr, "specula: %s\n", err->msg[0] ? err->msg : sp_status_name(err->status));
    return CLI_ERR;
}

int cli_failf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "specula: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return CLI_ERR;
}

int cli_threads(int64_t threads)
{
    if (threads > 0)
        return (int)threads;
    const char *e = getenv("SPECULA_THREADS");
    return e ? atoi(e) : 0;
}

int cli_precision(const char *s, sp_precision *out)
{
    if (!s || !strcmp(s, "fast")) {
        *out = SP_PRECISION_FAST;
        return CLI_OK;
    }
    if (!strcmp(s, "exact")) {
        *out = SP_PRECISION_EXACT;
        return CLI_OK;
    }
    fprintf(stderr, "specula: --precision must be exact or fast, not '%s'\n", s);
    return CLI_USAGE;
}

bool cli_has_tokenizer(const char *dir)
{
    char *p = sp_path_join(dir, "tokenizer.json");
    bool r = p && sp_file_exists(p);
    free(p);
    return r;
}
