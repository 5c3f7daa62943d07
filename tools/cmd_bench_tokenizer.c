/* cmd_bench_tokenizer.c: `specula bench-tokenizer -t PATH [--file F] [--mb N] [--runs R]
 * [--oracle TESTS_DIR] [--json]`: tokenizer load time and single-thread encode MB/s.
 *
 * The text (a file, or a few MB of generated mixed text: prose, code, multilingual, emoji,
 * special-token look-alikes) is split at newlines into documents, each encoded by one
 * call, median of R runs. With --oracle, the same text is measured with Hugging Face
 * tokenizers (tests/oracle/bench_tokenizers.js under TESTS_DIR) in the same run, and the
 * two id counts are compared. */
#include "cli.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const WORDS[] = {
    "the", "model", "returns", "a", "token", "for", "each", "position", "and", "speculative",
    "decoding", "verifies", "drafts", "in", "one", "pass", "while", "kernels", "stay", "exact",
    "über", "naïve", "café", "日本語", "中文", "한국어", "Привет", "مرحبا", "नमस्ते", "😀",
    "👍🏽", "don't", "we're", "I'll", "3.14159", "2026", "1,000,000", "http://x.org/a?b=c",
};
static const char *const LINES[] = {
    "def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) { a[i] += b[i]; }\n",
    "    indented    text\twith\ttabs   \n", "<|im_start|>user\nHello<|im_end|>\n",
    "SELECT id, name FROM users WHERE age >= 21;\n", "\n\n",
};

static char *make_text(size_t bytes, size_t *len)
{
    char *t = malloc(bytes + 256);
    if (!t)
        return NULL;
    cli_rng rng;
    cli_rng_seed(&rng, 42);
    size_t o = 0;
    while (o < bytes) {
        if (cli_rng_next(&rng) % 8 == 0) {
            const char *l = LINES[cli_rng_next(&rng) % (sizeof LINES / sizeof LINES[0])];
            size_t n = strlen(l);
            memcpy(t + o, l, n);
            o += n;
            continue;
        }
        int words = 8 + (int)(cli_rng_next(&rng) % 24);
        for (int w = 0; w < words; w++) {
            const char *s = WORDS[cli_rng_next(&rng) % (sizeof WORDS / sizeof WORDS[0])];
            size_t n = strlen(s);
            memcpy(t + o, s, n);
            o += n;
            t[o++] = w + 1 == words ? '.' : ' ';
        }
        t[o++] = '\n';
    }
    t[o] = '\0';
    *len = o;
    return t;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int cmd_bench_tokenizer(int argc, char **argv)
{
    const char *path = NULL, *file = NULL, *oracle = NULL;
    int64_t mb = 4, runs = 5;
    bool json = false;
    cli_opt opts[] = {
        {"--tokenizer", "-t", CLI_STR, &path, "model dir, tokenizer.json, or dir with it", 0},
        {"--file", NULL, CLI_STR, &file, "text to encode (default: generated mixed text)", 0},
        {"--mb", NULL, CLI_INT, &mb, "size of the generated text in MB (default 4)", 0},
        {"--runs", NULL, CLI_INT, &runs, "runs; the median is reported (default 5)", 0},
        {"--oracle", NULL, CLI_STR, &oracle, "tests dir: also time HF tokenizers (node)", 0},
        {"--json", NULL, CLI_FLAG, &json, "print one JSON object", 0},
        {0},
    };
    const char *usage = "specula bench-tokenizer -t PATH [--file F] [--mb N] [--runs R] [--oracle DIR] [--json]";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!path || mb < 1 || mb > 1024 || runs < 1 || runs > 100) {
        fprintf(stderr, "specula: bench-tokenizer needs -t (and sane --mb/--runs)\nusage: %s\n", usage);
        return CLI_USAGE;
    }
    sp_error err = {0};
    char *text = NULL;
    size_t len = 0;
    if (file ? cli_read_file(file, 1u << 30, &text, &len, &err) != SP_OK : !(text = make_text((size_t)mb << 20, &len)))
        return file ? cli_fail(&err) : cli_failf("out of memory");
    double t0 = cli_now_ms();
    sp_tokenizer *t;
    if (sp_tokenizer_open(path, &t, &err) != SP_OK) {
        free(text);
        return cli_fail(&err);
    }
    double load_ms = cli_now_ms() - t0;
    double *times = calloc((size_t)runs, sizeof *times);
    size_t n_ids = 0;
    for (int64_t r = 0; r < runs && rc == CLI_OK; r++) {
        double a = cli_now_ms();
        n_ids = 0;
        for (size_t s = 0; s <= len;) {
            const char *nl = memchr(text + s, '\n', len - s);
            size_t e = nl ? (size_t)(nl - text) : len;
            int32_t *ids;
            size_t k;
            if (sp_tokenizer_encode(t, text + s, e - s, false, &ids, &k, &err) != SP_OK) {
                rc = cli_fail(&err);
                break;
            }
            free(ids);
            n_ids += k;
            s = e + 1;
        }
        times[r] = cli_now_ms() - a;
    }
    qsort(times, (size_t)runs, sizeof *times, cmp_d);
    double med = times[runs / 2], mbs = (double)len / 1e6 / (med / 1e3);
    char ojson[512] = "";
    if (rc == CLI_OK && oracle) {
        char tmpl[] = "/tmp/specula-benchtok-XXXXXX";
        int fd = mkstemp(tmpl);
        if (fd >= 0 && write(fd, text, len) == (ssize_t)len) {
            char cmd[4096];
            snprintf(cmd, sizeof cmd, "node '%s/oracle/bench_tokenizers.js' '%s' '%s' %lld", oracle,
                     cli_file_exists(path) ? path : "", tmpl, (long long)runs);
            if (!cli_file_exists(path)) {
                char *tj = cli_path_join(path, "tokenizer.json");
                snprintf(cmd, sizeof cmd, "node '%s/oracle/bench_tokenizers.js' '%s' '%s' %lld",
                         oracle, tj ? tj : "", tmpl, (long long)runs);
                free(tj);
            }
            FILE *p = popen(cmd, "r");
            size_t got = p ? fread(ojson, 1, sizeof ojson - 1, p) : 0;
            ojson[got] = '\0';
            if (!p || pclose(p) != 0)
                ojson[0] = '\0';
        }
        if (fd >= 0) {
            close(fd);
            unlink(tmpl);
        }
        if (!ojson[0])
            fprintf(stderr, "specula: the oracle benchmark did not run (is node and "
                            "tests/.deps set up? scripts/fetch-test-deps.sh)\n");
    }
    if (rc == CLI_OK) {
        if (json)
            printf("{\"tokenizer\": \"%s\", \"bytes\": %zu, \"ids\": %zu, \"load_ms\": %.1f, "
                   "\"encode_ms\": %.1f, \"mb_s\": %.2f, \"oracle\": %s}\n",
                   path, len, n_ids, load_ms, med, mbs, ojson[0] ? ojson : "null");
        else {
            printf("specula:       load %.0f ms, encode %.2f MB/s (%zu bytes -> %zu ids, median of %lld)\n",
                   load_ms, mbs, len, n_ids, (long long)runs);
            if (ojson[0])
                printf("hf tokenizers: %s\n", ojson);
        }
    }
    free(times);
    free(text);
    sp_tokenizer_close(t);
    return rc;
}
