/* cli.c: option parsing and reporting shared by the subcommands (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
        /* every float option ends up a float: refuse what does not fit one */
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x) || fabs(x) > FLT_MAX)
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
    /* the pool caps at 512 threads: saturate before narrowing to int */
    if (threads > 0)
        return threads > 512 ? 512 : (int)threads;
    const char *e = getenv("SPECULA_THREADS");
    long v = e ? strtol(e, NULL, 10) : 0;
    return v > 512 ? 512 : v < 0 ? 0 : (int)v;
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

const char *cli_kernels_name(const sp_model *m)
{
    if (!strncmp(sp_model_device(m), "cpu", 3))
        return sp_cpu_kernels_name();
    return sp_model_precision(m) == SP_PRECISION_FAST ? "cuda tensor-core" : "cuda";
}

const char *cli_precision_name(const sp_model *m)
{
    return sp_model_precision(m) == SP_PRECISION_FAST ? "fast" : "exact";
}

bool cli_has_tokenizer(const char *dir)
{
    char *p = cli_path_join(dir, "tokenizer.json");
    bool r = p && cli_file_exists(p);
    free(p);
    return r;
}

const char *cli_device(const char *device)
{
    if (device && *device)
        return device;
    const char *env = getenv("SPECULA_DEVICE");
    return env && *env ? env : "auto";
}

/* The weights' copy to a device (or, on the CPU, to aligned memory), on one terminal line
 * of stderr (overwritten in place). */
static void load_progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx;
    fprintf(stderr, "\rspecula: copying weights: %.2f / %.2f GB%s",
            (double)done / 1e9, (double)total / 1e9, done == total ? "\n" : "");
    fflush(stderr);
}

sp_model_params cli_model_params(int64_t threads, const char *device)
{
    sp_model_params mp = sp_model_default_params();
    mp.n_threads = cli_threads(threads);
    mp.device = cli_device(device);
    const char *mm = getenv("SPECULA_MMAP"); /* CPU: compute on the mapping (bench: --mmap) */
    mp.map_weights = mm && *mm && strcmp(mm, "0") != 0;
    if (isatty(STDERR_FILENO))
        mp.load_progress = load_progress;
    return mp;
}

sp_status cli_model_open(const char *dir, const sp_model_params *mp, sp_model **m, sp_error *err)
{
    sp_status st = sp_model_open(dir, mp, m, err);
    if (st == SP_OK && (!mp->device || !strcmp(mp->device, "auto")))
        fprintf(stderr, "specula: running on %s (--device auto)\n", sp_model_device(*m));
    return st;
}

double cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static sp_status set_err(sp_error *err, sp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sp_status set_err(sp_error *err, sp_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = st;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

sp_status cli_read_file(const char *path, size_t max_bytes, char **out, size_t *n_bytes,
                        sp_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return set_err(err, SP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    sp_status rc = SP_OK;
    char *buf = NULL;
    if (fstat(fd, &st) != 0) {
        rc = set_err(err, SP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = set_err(err, SP_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    size_t size = (size_t)st.st_size;
    if (size > max_bytes) {
        rc = set_err(err, SP_ERR_LIMIT, "%s: file is %zu bytes, more than the %zu allowed", path,
                     size, max_bytes);
        goto done;
    }
    if (!(buf = malloc(size + 1))) {
        rc = set_err(err, SP_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, size);
        goto done;
    }
    for (size_t got = 0; got < size;) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = set_err(err, SP_ERR_IO, "%s: read failed: %s", path,
                         r == 0 ? "unexpected end of file" : strerror(errno));
            goto done;
        }
        got += (size_t)r;
    }
    buf[size] = '\0';
    *out = buf;
    buf = NULL;
    if (n_bytes)
        *n_bytes = size;
done:
    free(buf);
    close(fd);
    return rc;
}

bool cli_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *cli_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p)
        snprintf(p, a + b + 2, "%s%s%s", dir, a == 0 || dir[a - 1] == '/' ? "" : "/", name);
    return p;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void cli_rng_seed(cli_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t cli_rng_next(cli_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}
