/* cmd_bench.c: `specula bench -m DIR [--json]` measures prefill and decode tokens/s:
 * several runs of (prefill a random prompt, greedily decode), median of each, after an
 * untimed warm-up run (a prefill and two decode steps, as llama-bench warms up); and the
 * memory the process holds afterwards (resident and peak, from /proc/self/status) beside
 * the checkpoint's size on disk; and where the weights went: the device, the time to open
 * the model (with a GPU: the copy's GB/s), and on a GPU the copy bandwidth measured now
 * with the roofline of a decode token's weight reads. With --draft it also runs speculative greedy generation
 * on the same prompt in the same process and reports the speedup (the tokens are checked
 * to be identical to plain decoding's). Without -m it measures the bundled pair as `specula
 * run` uses it: plain vs speculative decoding of chat prompts rendered through the template
 * (bench_default). */
#include "cli.h"
#include "cli_spec.h"
#include "cli_talk.h"
#include "commands.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A /proc/self/status field in MiB (VmRSS, VmHWM), or -1. */
static double proc_mib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    double v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') {
            v = strtod(line + n + 1, NULL) / 1024.0;
            break;
        }
    fclose(f);
    return v;
}

/* Total size of the *.safetensors files in dir, MiB. */
static double checkpoint_mib(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    double total = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        struct stat st;
        if (n > 12 && !strcmp(e->d_name + n - 12, ".safetensors")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (!stat(path, &st))
                total += (double)st.st_size / 1048576.0;
        }
    }
    closedir(d);
    return total;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Where the weights went and how fast decode is against reading them: the device, the
 * load time and rate (of the copy to the device, or on the CPU to aligned memory), the
 * device copy bandwidth measured now, the bytes a token reads and the roofline they give
 * (a GPU's; on the CPU bench/compare-llama-cpp.sh measures the DRAM's beside). */
typedef struct bench_device {
    const char *name;
    double load_s, load_gb_s, weights_mib, copy_gb_s, token_gb, roofline, frac;
} bench_device;

static bench_device device_figures(sp_model *m, double load_s, double decode_tok_s)
{
    sp_model_info info;
    sp_model_get_info(m, &info);
    bench_device d = {.name = info.device, .load_s = load_s};
    uint64_t copied = info.device_bytes ? info.device_bytes : info.host_copy_bytes;
    d.weights_mib = (double)copied / 1048576.0;
    d.load_gb_s = load_s > 0 ? (double)copied / 1e9 / load_s : 0.0;
    d.token_gb = (double)info.token_bytes / 1e9;
    if (info.device_bytes)
        d.copy_gb_s = sp_model_copy_bandwidth(m);
    if (d.copy_gb_s > 0 && d.token_gb > 0) {
        d.roofline = d.copy_gb_s / d.token_gb;
        d.frac = decode_tok_s / d.roofline;
    }
    return d;
}

static void print_device(const bench_device *d)
{
    printf("device: %s; opened in %.2f s", d->name, d->load_s);
    if (d->weights_mib > 0)
        printf(" (%.1f MiB of weights copied, %.2f GB/s)", d->weights_mib, d->load_gb_s);
    printf("; %.1f MB of weights read per decode token", d->token_gb * 1e3);
    if (d->roofline > 0)
        printf("; copy bandwidth %.0f GB/s: roofline %.0f tok/s, decode at %.0f%%", d->copy_gb_s,
               d->roofline, 100.0 * d->frac);
    printf("\n");
}

static void print_device_json(const bench_device *d)
{
    printf(", \"device\": \"%s\", \"open_s\": %.3f, \"device_weights_mib\": %.1f, "
           "\"load_gb_s\": %.3f, \"token_gb\": %.4f, \"copy_gb_s\": %.1f, "
           "\"roofline_tok_s\": %.1f, \"roofline_fraction\": %.4f}\n",
           d->name, d->load_s, d->weights_mib, d->load_gb_s, d->token_gb, d->copy_gb_s, d->roofline,
           d->frac);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Plain vs speculative greedy decoding of gen_len tokens after the prompt, runs times. */
static int bench_spec(const char *model_dir, sp_session *s, cli_spec *spec, const int32_t *prompt,
                      int64_t prompt_len, int64_t gen_len, int64_t runs, bool json)
{
    sp_error err = {0};
    sp_generate_params gp = {.n_predict = gen_len, .ignore_eos = true,
                             .sampling = sp_sampling_default_params()};
    int32_t *a = malloc((size_t)gen_len * sizeof *a), *b = malloc((size_t)gen_len * sizeof *b);
    double *plain = calloc((size_t)runs, sizeof *plain), *fast = calloc((size_t)runs, sizeof *fast);
    sp_spec_stats ss = {0};
    int rc = !a || !b || !plain || !fast ? cli_failf("out of memory") : CLI_OK;
    for (int64_t r = 0; r < runs && rc == CLI_OK; r++) {
        sp_generate_stats st;
        sp_session_truncate(s, 0, NULL);
        if (sp_generate(s, prompt, (size_t)prompt_len, &gp, NULL, NULL, a, &st, &err) != SP_OK) {
            rc = cli_fail(&err);
            break;
        }
        plain[r] = (double)(st.n_generated - 1) / (st.decode_ms / 1e3);
        sp_session_truncate(s, 0, NULL);
        if (spec->draft_session)
            sp_session_truncate(spec->draft_session, 0, NULL);
        if (sp_generate_spec(s, prompt, (size_t)prompt_len, &gp, &spec->params, NULL, NULL, b, &st, &ss,
                             &err) != SP_OK) {
            rc = cli_fail(&err);
            break;
        }
        fast[r] = (double)(st.n_generated - 1) / (st.decode_ms / 1e3);
        if (memcmp(a, b, (size_t)gen_len * sizeof *a))
            rc = cli_failf("speculative greedy output differs from plain greedy output");
    }
    if (rc == CLI_OK) {
        double pm = median(plain, (int)runs), fm = median(fast, (int)runs);
        if (json) {
            printf("{\"model\": \"%s\", \"draft\": \"%s\", \"gen_len\": %lld, \"plain_decode_tok_s\": %.2f, "
                   "\"spec_decode_tok_s\": %.2f, \"speedup\": %.3f, \"spec\": ",
                   model_dir, spec->draft, (long long)gen_len, pm, fm, fm / pm);
            cli_spec_print_json(stdout, &ss);
            printf("}\n");
        } else {
            printf("%s: plain decode %.1f tok/s, speculative (--draft %s) %.1f tok/s: speedup %.2fx "
                   "(identical tokens), median of %lld runs\n",
                   model_dir, pm, spec->draft, fm, fm / pm, (long long)runs);
            cli_spec_print_summary(stdout, &ss);
        }
    }
    free(a);
    free(b);
    free(plain);
    free(fast);
    return rc;
}

/* The user messages of the default-pair benchmark (rendered through the chat template). */
static const char *const default_prompts[] = {
    "Write the function `dedent` from the `textwrap` module.",
    "Recite Psalm 23.",
    "What does the function `json.dumps` do?",
};
#define N_DEFAULT_PROMPTS (sizeof default_prompts / sizeof default_prompts[0])

static void add_stats(sp_spec_stats *a, const sp_spec_stats *b)
{
    a->drafts += b->drafts;
    a->drafted += b->drafted;
    a->accepted += b->accepted;
    for (int i = 0; i < SP_SPEC_MAX_K; i++) {
        a->accepted_per_pos[i] += b->accepted_per_pos[i];
        a->drafted_per_pos[i] += b->drafted_per_pos[i];
    }
    a->k_max = b->k_max > a->k_max ? b->k_max : a->k_max;
    a->plain_steps += b->plain_steps;
    a->draft_ms += b->draft_ms;
    a->verify_ms += b->verify_ms;
}

/* `specula bench` without -m: the bundled pair, plain vs speculative decoding of gen_len tokens
 * after each default prompt, runs times, interleaved; tokens/s over all of them. Greedy
 * (temperature 0) output is checked to be identical. */
static int bench_default(cli_spec *spec, int64_t gen_len, int64_t runs, double temp, int threads,
                         const char *device, const char *precision, bool json)
{
    char target[4096], draft[4096];
    if (!cli_default_pair(target, sizeof target, draft, sizeof draft))
        return cli_failf("bench: no -m and no bundled pair (models/default) in $SPECULA_MODELS, ./models or "
                         "the source tree");
    cli_talk t = {0};
    t.device = device;
    t.precision = precision;
    t.spec = *spec;
    if (!t.spec.draft)
        t.spec.draft = draft;
    if (!strcmp(t.spec.draft, "none"))
        return cli_failf("bench: the default pair is measured with a draft (--draft DIR|ngram|self|mtp)");
    int32_t *ids[N_DEFAULT_PROMPTS] = {0};
    size_t n_ids[N_DEFAULT_PROMPTS] = {0};
    int32_t *a = malloc((size_t)gen_len * sizeof *a), *b = malloc((size_t)gen_len * sizeof *b);
    int rc = !a || !b ? cli_failf("out of memory") : cli_talk_open_text(&t, target, true);
    size_t longest = 0;
    for (size_t i = 0; i < N_DEFAULT_PROMPTS && rc == CLI_OK; i++) {
        char *text = NULL;
        cli_msg msg = {"user", (char *)default_prompts[i]};
        rc = cli_talk_render(&t, &msg, 1, &text, &ids[i], &n_ids[i]);
        free(text);
        longest = n_ids[i] > longest ? n_ids[i] : longest;
    }
    if (rc == CLI_OK)
        rc = cli_talk_open_model(&t, (int64_t)longest + gen_len + 1, threads);
    double plain_ms = 0, spec_ms = 0;
    int64_t plain_n = 0, spec_n = 0;
    sp_spec_stats total = {0};
    sp_error err = {0};
    for (int64_t r = 0; r < runs && rc == CLI_OK; r++)
        for (size_t i = 0; i < N_DEFAULT_PROMPTS && rc == CLI_OK; i++) {
            sp_generate_params gp = {.n_predict = gen_len, .ignore_eos = true,
                                     .sampling = sp_sampling_default_params()};
            gp.sampling.temperature = (float)temp;
            gp.sampling.seed = (uint64_t)(r * 1000 + (int64_t)i);
            sp_generate_stats st;
            sp_spec_stats ss;
            cli_talk_truncate(&t, 0);
            if (sp_generate(t.s, ids[i], n_ids[i], &gp, NULL, NULL, a, &st, &err) != SP_OK) {
                rc = cli_fail(&err);
                break;
            }
            plain_ms += st.decode_ms;
            plain_n += st.n_generated - 1;
            cli_talk_truncate(&t, 0);
            if (cli_talk_generate(&t, ids[i], n_ids[i], &gp, NULL, NULL, b, &st, &ss, &err) != SP_OK) {
                rc = cli_fail(&err);
                break;
            }
            spec_ms += st.decode_ms;
            spec_n += st.n_generated - 1;
            add_stats(&total, &ss);
            if (temp == 0 && memcmp(a, b, (size_t)gen_len * sizeof *a))
                rc = cli_failf("speculative greedy output differs from plain greedy output");
        }
    if (rc == CLI_OK) {
        double pt = plain_n / (plain_ms / 1e3), ft = spec_n / (spec_ms / 1e3);
        double mal = total.drafts ? 1.0 + (double)total.accepted / (double)total.drafts : 0.0;
        if (json) {
            printf("{\"model\": \"%s\", \"draft\": \"%s\", \"prompts\": %zu, \"runs\": %lld, \"gen_len\": %lld, "
                   "\"temperature\": %g, \"threads\": %d, \"plain_tok_s\": %.2f, \"spec_tok_s\": %.2f, "
                   "\"speedup\": %.3f, \"mean_acceptance_length\": %.4f, \"acceptance_rate\": %.4f, \"spec\": ",
                   target, t.spec.draft, N_DEFAULT_PROMPTS, (long long)runs, (long long)gen_len, temp, threads, pt,
                   ft, ft / pt, mal, total.drafted ? (double)total.accepted / (double)total.drafted : 0.0);
            cli_spec_print_json(stdout, &total);
            printf("}\n");
        } else {
            printf("%s with draft %s, %zu chat prompts x %lld runs, %lld tokens each, temperature %g:\n"
                   "plain decode %.1f tok/s, speculative %.1f tok/s: speedup %.2fx, mean acceptance length %.2f\n",
                   target, t.spec.draft, N_DEFAULT_PROMPTS, (long long)runs, (long long)gen_len, temp, pt, ft,
                   ft / pt, mal);
            cli_spec_print_summary(stdout, &total);
        }
    }
    for (size_t i = 0; i < N_DEFAULT_PROMPTS; i++)
        free(ids[i]);
    free(a);
    free(b);
    cli_talk_close(&t);
    spec->draft_session = NULL; /* closed with t */
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    const char *model_dir = NULL;
    int64_t prompt_len = 128, gen_len = 64, runs = 5, threads = 0;
    const char *device = NULL;
    const char *precision_s = NULL;
    bool json = false, map_weights = false;
    double temp = 0;
    const char *tokens_s = NULL;
    cli_spec spec = {0};
    cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model_dir, "model directory", 0},
        {"--prompt-len", NULL, CLI_INT, &prompt_len, "prompt tokens per run (default 128)", 0},
        {"--gen-len", NULL, CLI_INT, &gen_len, "decoded tokens per run (default 64)", 0},
        {"--runs", NULL, CLI_INT, &runs, "runs; the median is reported (default 5)", 0},
        {"--threads", "-t", CLI_INT, &threads, "worker threads (default: all CPUs)", 0},
        CLI_DEVICE_OPT(device),
        CLI_MMAP_OPT(map_weights),
        {"--precision", NULL, CLI_STR, &precision_s, "matmul arithmetic: fast (bf16 inputs, default) or exact (fp32)", 0},
        {"--json", NULL, CLI_FLAG, &json, "print one JSON object", 0},
        {"--tokens", NULL, CLI_STR, &tokens_s, "prompt token ids (default: random, --prompt-len)", 0},
        {"--temp", NULL, CLI_FLOAT, &temp, "temperature of the default-pair benchmark (default 0)", 0},
        CLI_SPEC_OPTS(spec),
        {0},
    };
    const char *usage = "specula bench -m DIR [--prompt-len N] [--gen-len N] [--runs R] [--tokens IDS] "
                        "[--draft DIR|ngram|self|mtp [--draft-k K]] [--json]\n"
                        "       specula bench [--temp T] [--gen-len N] [--runs R] [--json]   (the bundled pair, "
                        "plain vs speculative)";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!model_dir) {
        bool runs_seen = false, gen_seen = false;
        for (cli_opt *o = opts; o->name; o++) {
            runs_seen |= o->dst == &runs && o->seen;
            gen_seen |= o->dst == &gen_len && o->seen;
        }
        if (gen_len < 1 || runs < 1 || runs > 1000 || temp < 0)
            return cli_failf("bench: --gen-len and --runs must be positive, --temp not negative");
        return bench_default(&spec, gen_seen ? gen_len : 128, runs_seen ? runs : 3, temp, cli_threads(threads),
                             device, precision_s, json);
    }
    if (prompt_len < 1 || gen_len < 1 || runs < 1 || runs > 1000)
        return cli_failf("bench: --prompt-len, --gen-len and --runs must be positive");
    sp_error err = {0};
    int32_t *prompt = NULL;
    if (tokens_s) {
        size_t n_tok;
        if (cli_parse_tokens(tokens_s, &prompt, &n_tok) != 0 || n_tok == 0) {
            fprintf(stderr, "specula: --tokens: cannot parse '%s'\n", tokens_s);
            free(prompt);
            return CLI_USAGE;
        }
        prompt_len = (int64_t)n_tok;
    }
    if (prompt_len > INT64_MAX - gen_len) {
        free(prompt);
        return cli_failf("bench: --prompt-len %lld + --gen-len %lld overflows", (long long)prompt_len,
                         (long long)gen_len);
    }
    sp_model_params mp = cli_model_params(threads, device);
    mp.map_weights = mp.map_weights || map_weights;
    if (cli_precision(precision_s, &mp.precision) != CLI_OK) {
        free(prompt);
        return CLI_USAGE;
    }
    mp.n_ctx = prompt_len + gen_len;
    sp_model *m = NULL;
    sp_session *s = NULL;
    double *pf = calloc((size_t)runs, sizeof *pf), *dc = calloc((size_t)runs, sizeof *dc);
    rc = CLI_OK;
    if (!pf || !dc) {
        rc = cli_failf("out of memory");
        goto done;
    }
    double t_open = cli_now_ms();
    if (cli_model_open(model_dir, &mp, &m, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    t_open = (cli_now_ms() - t_open) / 1e3;
    sp_session_params sp = {.n_ctx = prompt_len + gen_len};
    if (sp_session_new(m, &sp, &s, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    if (!prompt && !(prompt = malloc((size_t)prompt_len * sizeof *prompt))) {
        rc = cli_failf("out of memory");
        goto done;
    }
    cli_rng rng;
    cli_rng_seed(&rng, 1234);
    for (int64_t i = 0; !tokens_s && i < prompt_len; i++)
        prompt[i] = (int32_t)(cli_rng_next(&rng) % (uint64_t)sp_model_n_vocab(m));
    for (int64_t i = 0; i < prompt_len; i++)
        if (prompt[i] < 0 || prompt[i] >= sp_model_n_vocab(m)) {
            rc = cli_failf("--tokens: id %d is outside the vocabulary", prompt[i]);
            goto done;
        }
    if (spec.draft) {
        if ((rc = cli_spec_open(&spec, m, s, model_dir, NULL, prompt_len + gen_len, &mp)) == CLI_OK)
            rc = bench_spec(model_dir, s, &spec, prompt, prompt_len, gen_len, runs, json);
        goto done;
    }
    /* r = -1 is an untimed warm-up (as llama-bench's): it pages the memory-mapped weights
     * in and sizes the buffers, which a first pass would otherwise count as prefill time */
    for (int64_t r = -1; r < runs; r++) {
        sp_session_truncate(s, 0, NULL);
        double t0 = cli_now_ms();
        int32_t tok = -1; /* greedy: the evals pick (on the device where the backend can) */
        if (sp_session_eval_greedy(s, prompt, (size_t)prompt_len, &tok, &err) != SP_OK) {
            rc = cli_fail(&err);
            goto done;
        }
        double t1 = cli_now_ms();
        /* greedy decoding as generate does it (each step fed on the device where the
         * backend picks there) */
        size_t n_new = 0;
        if (sp_session_decode_greedy(s, tok, (size_t)(r < 0 && gen_len > 2 ? 2 : gen_len), NULL,
                                     NULL, &n_new, &err) != SP_OK) {
            rc = cli_fail(&err);
            goto done;
        }
        double t2 = cli_now_ms();
        if (r < 0)
            continue;
        pf[r] = (double)prompt_len / ((t1 - t0) / 1e3);
        dc[r] = (double)gen_len / ((t2 - t1) / 1e3);
    }
    double pfm = median(pf, (int)runs), dcm = median(dc, (int)runs);
    double rss = proc_mib("VmRSS"), peak = proc_mib("VmHWM"), file = checkpoint_mib(model_dir);
    double wmib = (double)sp_model_weight_bytes(m) / 1048576.0;
    bench_device dv = device_figures(m, t_open, dcm);
    if (json)
        printf("{\"model\": \"%s\", \"arch\": \"%s\", \"threads\": %d, \"prompt_len\": %lld, "
               "\"gen_len\": %lld, \"runs\": %lld, \"prefill_tok_s\": %.2f, "
               "\"decode_tok_s\": %.2f, \"checkpoint_mib\": %.1f, \"weights_mib\": %.1f, "
               "\"rss_mib\": %.1f, \"peak_rss_mib\": %.1f, \"precision\": \"%s\", \"kernels\": \"%s\"",
               model_dir, sp_model_arch_name(m), mp.n_threads, (long long)prompt_len,
               (long long)gen_len, (long long)runs, pfm, dcm, file, wmib, rss, peak,
               cli_precision_name(m), cli_kernels_name(m));
    if (json)
        print_device_json(&dv);
    else
        printf("%s (%s): prefill %.1f tok/s (%lld tokens), decode %.1f tok/s (%lld tokens), "
               "median of %lld runs (%s precision, %s kernels)\nmemory: checkpoint %.1f MiB, "
               "weights used %.1f MiB, resident %.1f MiB, peak %.1f MiB\n",
               model_dir, sp_model_arch_name(m), pfm, (long long)prompt_len, dcm,
               (long long)gen_len, (long long)runs, cli_precision_name(m), cli_kernels_name(m), file,
               wmib, rss, peak);
    if (!json)
        print_device(&dv);
done:
    cli_spec_close(&spec);
    free(pf);
    free(dc);
    free(prompt);
    sp_session_free(s);
    sp_model_close(m);
    return rc;
}
