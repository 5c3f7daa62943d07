/* cmd_trace.c: `specula trace -m DIR (--tokens IDS | -p TEXT) [-n N] [--draft ...]
 * -o FILE.jsonl`: runs the prompt (and N generated tokens, speculatively with --draft)
 * and writes one JSON line per (pass, layer, op, position) of the target and the draft:
 * statistics and an exact-bits hash (see src/diag/trace_writer.h). --perturb LAYER:OP:F
 * multiplies one op's output by F (a planted divergence, for trying `specula diff`). */
#include "cli.h"
#include "cli_spec.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_perturb(const char *s, int *layer, char *name, float *factor)
{
    double f = 0;
    if (sscanf(s, "%d:%63[a-z_]:%lf", layer, name, &f) != 3 || !sp_trace_op_valid(name))
        return cli_failf("--perturb '%s': expected LAYER:OP:FACTOR with an op name such as attn_q or "
                         "mlp_out", s);
    *factor = (float)f;
    return CLI_OK;
}

/* The per-layer |X| (rms of each layer's output at the last traced position) and what the
 * final norm makes of it: growth the final norm removes is harmless (seed 004). */
static void print_residuals(const sp_trace_writer *w, const char *label)
{
    double rms[1024], fin = 0;
    size_t n = sp_trace_writer_residuals(w, rms, 1024, &fin);
    if (n == 0)
        return;
    n = n < 1024 ? n : 1024;
    fprintf(stderr, "specula: %s residual |X| (rms) by layer at the last position:", label);
    for (size_t l = 0; l < n; l++)
        fprintf(stderr, " %zu:%.3g", l, rms[l]);
    fprintf(stderr, "; growth x%.3g over the layers; after the final norm: rms %.3g\n",
            rms[0] > 0 ? rms[n - 1] / rms[0] : 0.0, fin);
}

int cmd_trace(int argc, char **argv)
{
    const char *model_dir = NULL, *tokens_s = NULL, *prompt = NULL, *out_path = NULL, *perturb = NULL;
    int64_t n_predict = 0, threads = 0;
    const char *device = NULL;
    const char *precision_s = NULL;
    double temp = 0;
    uint64_t seed = 0;
    cli_spec spec = {0};
    cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model_dir, "model directory", 0},
        {"--tokens", NULL, CLI_STR, &tokens_s, "prompt as comma-separated token ids", 0},
        {"--prompt", "-p", CLI_STR, &prompt, "prompt text (needs tokenizer.json)", 0},
        {"--n-predict", "-n", CLI_INT, &n_predict, "tokens to generate after the prompt (default 0)", 0},
        {"--temp", NULL, CLI_FLOAT, &temp, "temperature (default 0: greedy)", 0},
        {"--seed", NULL, CLI_U64, &seed, "random seed", 0},
        {"--output", "-o", CLI_STR, &out_path, "trace file (JSON lines)", 0},
        {"--perturb", NULL, CLI_STR, &perturb, "LAYER:OP:FACTOR: plant a divergence", 0},
        {"--threads", "-t", CLI_INT, &threads, "worker threads (default: all CPUs)", 0},
        CLI_DEVICE_OPT(device),
        {"--precision", NULL, CLI_STR, &precision_s, "matmul arithmetic: fast (bf16 inputs, default) or exact (fp32)", 0},
        CLI_SPEC_OPTS(spec),
        {0},
    };
    const char *usage = "specula trace -m DIR (--tokens IDS | -p TEXT) [-n N] [--draft DIR|ngram|self|mtp] "
                        "-o FILE.jsonl";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!model_dir || !out_path || (!tokens_s == !prompt)) {
        fprintf(stderr, "specula: trace needs -m, -o and one of --tokens or -p\nusage: %s\n", usage);
        return CLI_USAGE;
    }
    int layer = 0;
    char op[64] = "";
    float factor = 1;
    if (perturb && (rc = parse_perturb(perturb, &layer, op, &factor)))
        return rc;
    sp_error err = {0};
    sp_tokenizer *tok = NULL;
    int32_t *tokens = NULL;
    size_t n = 0;
    if (prompt) {
        if (sp_tokenizer_open(model_dir, &tok, &err) != SP_OK ||
            sp_tokenizer_encode_prompt(tok, prompt, strlen(prompt), &tokens, &n, &err) != SP_OK) {
            sp_tokenizer_close(tok);
            return cli_fail(&err);
        }
    } else if (cli_parse_tokens(tokens_s, &tokens, &n) != 0 || n == 0) {
        fprintf(stderr, "specula: --tokens: cannot parse '%s'\n", tokens_s);
        free(tokens);
        return CLI_USAGE;
    }
    FILE *f = NULL;
    sp_model *m = NULL;
    sp_session *s = NULL;
    sp_trace_writer *wt = NULL, *wd = NULL;
    sp_model_params mp = cli_model_params(threads, device);
    if (cli_precision(precision_s, &mp.precision) != CLI_OK) {
        rc = CLI_USAGE;
        goto done;
    }
    if (n_predict < 0) {
        rc = cli_failf("-n: cannot generate %lld tokens", (long long)n_predict);
        goto done;
    }
    /* saturate n + n_predict + 1, then cap to the model once it is open */
    int64_t n_ctx;
    if (__builtin_add_overflow((int64_t)n, n_predict, &n_ctx) || n_ctx == INT64_MAX)
        n_ctx = INT64_MAX;
    else
        n_ctx++;
    if (cli_model_open(model_dir, &mp, &m, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    if (n_ctx > sp_model_n_ctx_max(m)) {
        if ((int64_t)n > sp_model_n_ctx_max(m)) {
            rc = cli_failf("%s: a prompt of %zu tokens exceeds the model's context of %lld", model_dir, n,
                           (long long)sp_model_n_ctx_max(m));
            goto done;
        }
        n_ctx = sp_model_n_ctx_max(m);
    }
    sp_session_params sp = {.n_ctx = n_ctx};
    if (sp_session_new(m, &sp, &s, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    if (spec.draft && (rc = cli_spec_open(&spec, m, s, model_dir, tok, n_ctx, &mp)))
        goto done;
    if (!(f = fopen(out_path, "w"))) {
        rc = cli_failf("cannot write '%s'", out_path);
        goto done;
    }
    if (sp_trace_writer_new(f, "target", &wt, &err) != SP_OK ||
        (spec.draft_session && sp_trace_writer_new(f, "draft", &wd, &err) != SP_OK)) {
        rc = cli_fail(&err);
        goto done;
    }
    if (*op && sp_trace_writer_set_perturb(wt, layer, op, factor, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    sp_trace_writer_attach(wt, s);
    if (wd)
        sp_trace_writer_attach(wd, spec.draft_session);
    sp_generate_params gp = {.n_predict = n_predict, .ignore_eos = true, .sampling = sp_sampling_default_params()};
    gp.sampling.temperature = (float)temp;
    gp.sampling.seed = seed;
    sp_generate_stats st;
    sp_spec_stats ss;
    sp_status gs = spec.draft ? sp_generate_spec(s, tokens, n, &gp, &spec.params, NULL, NULL, NULL, &st, &ss, &err)
                              : sp_generate(s, tokens, n, &gp, NULL, NULL, NULL, &st, &err);
    if (gs != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    if (fflush(f) != 0 || ferror(f) || sp_trace_writer_failed(wt)) {
        rc = cli_failf("writing '%s' failed", out_path);
        goto done;
    }
    fprintf(stderr, "specula: traced %lld prompt + %lld generated tokens: %lld lines to %s (%s precision, %s kernels)\n",
            (long long)n, (long long)st.n_generated,
            (long long)(sp_trace_writer_lines(wt) + (wd ? sp_trace_writer_lines(wd) : 0)), out_path,
            cli_precision_name(m), cli_kernels_name(m));
    print_residuals(wt, "target");
    if (wd)
        print_residuals(wd, "draft");
done:
    if (f)
        fclose(f);
    sp_trace_writer_free(wt);
    sp_trace_writer_free(wd);
    cli_spec_close(&spec);
    sp_session_free(s);
    sp_model_close(m);
    sp_tokenizer_close(tok);
    free(tokens);
    return rc;
}
