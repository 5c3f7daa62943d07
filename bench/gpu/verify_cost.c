/* verify_cost.c: the verify-cost curve of issue 11, through the public API only.
 *
 *   verify_cost -m DIR [--device cuda|cpu] [--precision exact|fast] [--threads N] [--ctx N]
 *               [--reps R] [--kmax K] [--cpu-time] [--greedy] [--json]
 *
 * --precision picks the matmul arithmetic (default exact, the library's; the CLI runs
 * fast: BF16 dot products on the CPU, tensor cores for BF16 weights on CUDA) and --threads the CPU worker count (default: the library's). --cpu-time times CPU
 * seconds of the process instead of wall time: with --threads 1, what one core spends,
 * comparable while other work shares the cores (wall medians are not).
 * Fills a session with a prompt of --ctx tokens (default 128), then for each k = 1..K
 * (default 8) times R (default 20) repetitions of: eval k+1 tokens with logits for every
 * row (what a speculative verify pass asks for), then sp_session_truncate back. The
 * baseline is one decode step: eval 1 token (last logits only), truncate back. Reports the
 * median times and ratio(k) = verify(k+1 tokens) / decode step: speculation with k
 * drafts pays when the expected accepted tokens + 1 exceed ratio(k) plus the draft cost.
 * --greedy times what greedy decoding reads instead: the decode step's pick
 * (sp_session_eval_greedy) and every verify row's pick (sp_session_eval_picks), which a
 * GPU makes on the device, reading back ids instead of logits.
 * For a mixture of experts, once the timing is done, one more verify pass per k is traced
 * (sp_trace_writer_experts: the ids the routing chose) and the distinct experts it touched
 * are reported per k, the mean over the MoE layers: each one's weights are read once per
 * pass, so this is what a verify batch reads beyond a decode step's top_k a layer. */
#include "specula.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CLOCK_MONOTONIC, or with --cpu-time the CPU time of all the process's threads. */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(clock_id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The mean over the MoE layers of the distinct experts one pass of k + 1 tokens after the
 * context touches, for k = 1..kmax, into ex[k] (traced passes: untimed, after the timing).
 * *w: the writer attached to s, which the caller frees after s. */
static int count_experts(sp_session *s, const int32_t *toks, int ctx, int kmax, float *logits,
                         double *ex, sp_trace_writer **w, sp_error *err)
{
    FILE *f = fopen("/dev/null", "w");
    int32_t d[1024];
    if (!f || sp_trace_writer_new(f, "target", w, err) != SP_OK)
        goto fail;
    sp_trace_writer_attach(*w, s);
    for (int k = 1; k <= kmax; k++) {
        if (sp_session_eval(s, toks + ctx, (size_t)k + 1, logits, err) != SP_OK ||
            sp_session_truncate(s, ctx, err) != SP_OK)
            goto fail;
        size_t n = sp_trace_writer_experts(*w, d, 1024), moe = 0;
        double sum = 0;
        for (size_t l = 0; l < n && l < 1024; l++)
            if (d[l] > 0) {
                sum += d[l];
                moe++;
            }
        ex[k] = moe ? sum / (double)moe : 0;
    }
    fclose(f); /* no pass writes to it any more */
    return 0;
fail:
    fprintf(stderr, "verify_cost: counting experts: %s\n", err->msg);
    if (f)
        fclose(f);
    return 1;
}

#define CHECK(call)                                                                         \
    do {                                                                                    \
        if ((call) != SP_OK) {                                                              \
            fprintf(stderr, "verify_cost: %s: %s\n", #call, err.msg);                       \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

static int greedy; /* --greedy: picks instead of logits */

/* One timed shape: sh 0 the decode step (1 token), else n tokens wanting every row. */
static sp_status eval_shape(sp_session *s, const int32_t *toks, size_t n, int sh, float *logits,
                            int32_t *picks, sp_error *err)
{
    if (!greedy)
        return sp_session_eval(s, toks, n, sh ? logits : NULL, err);
    int32_t next;
    return sh ? sp_session_eval_picks(s, toks, n, logits, picks, err)
              : sp_session_eval_greedy(s, toks, n, &next, err);
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *device = "cuda";
    const char *prec = "exact";
    int ctx = 128, reps = 20, kmax = 8, json = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc)
            prec = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc)
            ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kmax") && i + 1 < argc)
            kmax = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--cpu-time"))
            clock_id = CLOCK_PROCESS_CPUTIME_ID;
        else if (!strcmp(argv[i], "--greedy"))
            greedy = 1;
        else {
            fprintf(stderr, "usage: %s -m DIR [--device D] [--precision exact|fast] [--threads N] [--ctx N] [--reps R] [--kmax K] [--cpu-time] [--greedy] [--json]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!dir || ctx < 1 || reps < 1 || kmax < 1 || kmax > 64 || threads < 0 ||
        (strcmp(prec, "exact") && strcmp(prec, "fast"))) {
        fprintf(stderr, "usage: %s -m DIR [--device D] [--precision exact|fast] [--threads N] [--ctx N] [--reps R] [--kmax K] [--cpu-time] [--greedy] [--json]\n", argv[0]);
        return 2;
    }
    sp_error err = {0};
    sp_model_params mp = sp_model_default_params();
    mp.device = device;
    mp.precision = strcmp(prec, "fast") ? SP_PRECISION_EXACT : SP_PRECISION_FAST;
    if (threads)
        mp.n_threads = threads;
    mp.n_ctx = ctx + kmax + 16;
    sp_model *m = NULL;
    CHECK(sp_model_open(dir, &mp, &m, &err));
    sp_session_params sp = sp_session_default_params();
    sp.n_ctx = ctx + kmax + 16;
    sp_session *s = NULL;
    CHECK(sp_session_new(m, &sp, &s, &err));
    int64_t V = sp_model_n_vocab(m);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(ctx + kmax + 1));
    float *logits = malloc(sizeof(float) * (size_t)V * (size_t)(kmax + 1));
    int32_t picks[65];
    /* times[shape * reps + r]: shape 0 is the decode step (1 token, last logits only), 1 is
     * 1 token with its logits row (the verify API path at k = 0), 1 + k is k + 1 tokens with
     * every row. Repetitions go round the shapes, so a change in the machine's load falls on
     * every shape alike. */
    int n_shapes = kmax + 2;
    double *times = malloc(sizeof(double) * (size_t)reps * (size_t)n_shapes);
    if (!toks || !logits || !times)
        return 1;
    for (int i = 0; i < ctx + kmax + 1; i++)
        toks[i] = (int32_t)(3 + (i * 7919) % (V - 3 > 1 ? V - 3 : 1));
    CHECK(sp_session_eval(s, toks, (size_t)ctx, NULL, &err));
    /* warm-up: every shape once */
    for (int k = 0; k <= kmax; k++) {
        CHECK(eval_shape(s, toks + ctx, (size_t)k + 1, k, logits, picks, &err));
        CHECK(sp_session_truncate(s, ctx, &err));
    }
    for (int r = 0; r < reps; r++)
        for (int sh = 0; sh < n_shapes; sh++) {
            size_t n = sh < 2 ? 1 : (size_t)sh;
            double t0 = now_s();
            CHECK(eval_shape(s, toks + ctx, n, sh, logits, picks, &err));
            times[(size_t)sh * (size_t)reps + (size_t)r] = now_s() - t0;
            CHECK(sp_session_truncate(s, ctx, &err));
        }
    double base[2] = {median(times, reps), median(times + reps, reps)};
    sp_model_info info;
    sp_model_get_info(m, &info);
    double ex[65] = {0};
    sp_trace_writer *tw = NULL;
    if (info.n_moe_layers > 0 && count_experts(s, toks, ctx, kmax, logits, ex, &tw, &err))
        return 1;
    if (!json) {
        printf("model %s, device %s, %s precision, %s kernels, context %d, %d reps (medians of %s)\n", dir,
               sp_model_device(m), prec, sp_cpu_kernels_name(), ctx, reps,
               clock_id == CLOCK_MONOTONIC ? "wall time" : "process CPU time");
        printf("%s\n", greedy ? "greedy: every pass reads back picks (sp_session_eval_greedy / _picks)"
                             : "every pass reads back logits");
        printf("decode step (1 token, last %s): %.3f ms = %.1f tok/s\n", greedy ? "pick" : "logits",
               base[0] * 1e3, 1.0 / base[0]);
        printf("1 token with its %s:        %.3f ms\n", greedy ? "pick" : "logits row", base[1] * 1e3);
        if (info.n_moe_layers > 0)
            printf("mixture of experts: %lld of %lld experts a token, %lld MoE layers; distinct experts a "
                   "verify pass touches, mean over those layers\n",
                   (long long)info.n_experts_per_tok, (long long)info.n_experts,
                   (long long)info.n_moe_layers);
        printf("| k | tokens | verify ms | verify / decode step | ms per token | distinct experts |\n"
               "|---|---|---|---|---|---|\n");
    } else {
        printf("{\"model\": \"%s\", \"device\": \"%s\", \"ctx\": %d, \"greedy\": %s, \"decode_ms\": %.4f, \"one_with_logits_ms\": %.4f, \"curve\": [",
               dir, sp_model_device(m), ctx, greedy ? "true" : "false", base[0] * 1e3, base[1] * 1e3);
    }
    for (int k = 1; k <= kmax; k++) {
        double v = median(times + (size_t)(k + 1) * (size_t)reps, reps);
        if (!json && info.n_moe_layers > 0)
            printf("| %d | %d | %.3f | %.2f | %.3f | %.2f |\n", k, k + 1, v * 1e3, v / base[0],
                   v * 1e3 / (k + 1), ex[k]);
        else if (!json)
            printf("| %d | %d | %.3f | %.2f | %.3f | - |\n", k, k + 1, v * 1e3, v / base[0], v * 1e3 / (k + 1));
        else
            printf("%s{\"k\": %d, \"verify_ms\": %.4f, \"ratio\": %.4f, \"distinct_experts\": %.4f}",
                   k > 1 ? ", " : "", k, v * 1e3, v / base[0], ex[k]);
    }
    if (json)
        printf("]}\n");
    sp_session_free(s);
    sp_trace_writer_free(tw); /* after the session it observed */
    sp_model_close(m);
    free(toks);
    free(logits);
    free(times);
    return 0;
}
