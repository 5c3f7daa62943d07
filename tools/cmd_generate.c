/* cmd_generate.c: `specula generate -m DIR (--tokens IDS | -p TEXT) -n N [sampling]
 * [--draft DIR|ngram|self|mtp ...] [--json]`. Sampling defaults come from generation_config.json (greedy when it does not
 * sample); --temp 0 is greedy. With -p the prompt is encoded with the model's tokenizer
 * and generated text streams to stdout as it completes (whole UTF-8 characters only);
 * with --tokens the generated ids stream instead. A summary goes to stderr. --json prints
 * one object instead: {"tokens": [...], "text": ..., "stop_reason": ..., "timing": {...}},
 * plus "spec": {...} when speculating (see cli_spec.c). */
#include "cli.h"
#include "cli_spec.h"
#include "commands.h"

#include "json_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct stream_ctx {
    bool json;
    size_t n;
    sp_detokenizer *detok; /* text mode when not NULL */
    sp_status status;
    sp_error err;
} stream_ctx;

static bool on_token(void *ctx, int32_t tok)
{
    stream_ctx *c = ctx;
    c->n++;
    if (c->json)
        return true;
    if (!c->detok) {
        printf("%s%d", c->n > 1 ? " " : "", tok);
        fflush(stdout);
        return true;
    }
    const char *piece;
    size_t len;
    c->status = sp_detokenizer_push(c->detok, tok, &piece, &len, &c->err);
    if (c->status != SP_OK)
        return false;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}

static void print_json(const int32_t *toks, const sp_generate_stats *st, sp_tokenizer *tok,
                       bool special, const sp_spec_stats *spec)
{
    printf("{\"tokens\": [");
    for (int64_t i = 0; i < st->n_generated; i++)
        printf("%s%d", i ? ", " : "", toks[i]);
    printf("]");
    if (tok) {
        char *text;
        size_t len;
        printf(", \"text\": ");
        if (sp_tokenizer_decode(tok, toks, (size_t)st->n_generated, !special, &text, &len, NULL) ==
            SP_OK) {
            cli_json_write_string(stdout, text, len);
            free(text);
        } else {
            printf("null");
        }
    }
    double dec_n = st->n_generated > 1 ? (double)(st->n_generated - 1) : 0;
    printf(", \"stop_reason\": \"%s\", \"timing\": {\"prompt_tokens\": %lld, "
           "\"generated_tokens\": %lld, \"prefill_ms\": %.3f, \"decode_ms\": %.3f, "
           "\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f}",
           st->stop_reason, (long long)st->n_prompt, (long long)st->n_generated, st->prefill_ms,
           st->decode_ms, st->prefill_ms > 0 ? st->n_prompt / (st->prefill_ms / 1e3) : 0.0,
           st->decode_ms > 0 ? dec_n / (st->decode_ms / 1e3) : 0.0);
    if (spec) {
        printf(", \"spec\": ");
        cli_spec_print_json(stdout, spec);
    }
    printf("}\n");
}

int cmd_generate(int argc, char **argv)
{
    const char *model_dir = NULL, *tokens_s = NULL, *prompt = NULL;
    int64_t n_predict = 32, top_k = 0, threads = 0, n_ctx = 0;
    const char *device = NULL;
    const char *precision_s = NULL;
    double temp = 0, top_p = 1, min_p = 0;
    uint64_t seed = 0;
    bool json = false, ignore_eos = false, special = false;
    const char *tok_path = NULL;
    cli_spec spec = {0};
    cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model_dir, "model directory", 0},
        {"--tokens", NULL, CLI_STR, &tokens_s, "prompt as comma-separated token ids", 0},
        {"--prompt", "-p", CLI_STR, &prompt, "prompt text (needs tokenizer.json)", 0},
        {"--n-predict", "-n", CLI_INT, &n_predict, "most tokens to generate (default 32)", 0},
        {"--temp", NULL, CLI_FLOAT, &temp, "temperature; 0 = greedy", 0},
        {"--top-k", NULL, CLI_INT, &top_k, "keep the k most likely tokens (0 = off)", 0},
        {"--top-p", NULL, CLI_FLOAT, &top_p, "nucleus sampling mass (1 = off)", 0},
        {"--min-p", NULL, CLI_FLOAT, &min_p, "drop tokens below min-p x top probability", 0},
        {"--seed", NULL, CLI_U64, &seed, "random seed (default 0)", 0},
        {"--ignore-eos", NULL, CLI_FLAG, &ignore_eos, "do not stop at end-of-sequence", 0},
        {"--ctx", "-c", CLI_INT, &n_ctx, "context size (default: prompt + n, capped by model)", 0},
        {"--threads", "-t", CLI_INT, &threads, "worker threads (default: all CPUs)", 0},
        CLI_DEVICE_OPT(device),
        {"--precision", NULL, CLI_STR, &precision_s, "matmul arithmetic: fast (bf16 inputs, default) or exact (fp32)", 0},
        {"--json", NULL, CLI_FLAG, &json, "print one JSON object with tokens and timing", 0},
        {"--tokenizer", NULL, CLI_STR, &tok_path, "tokenizer for -p (default: the model dir)", 0},
        {"--special", NULL, CLI_FLAG, &special, "print special tokens in generated text", 0},
        CLI_SPEC_OPTS(spec),
        {0},
    };
    const char *usage = "specula generate -m DIR (--tokens IDS | -p TEXT) -n N [--temp T] "
                        "[--top-k K] [--top-p P] [--min-p P] [--seed S] [--draft DIR|ngram|self|mtp] "
                        "[--draft-k K] [--draft-p-min P] [--json]";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!model_dir || (!tokens_s && !prompt) || (tokens_s && prompt)) {
        fprintf(stderr, "specula: generate needs -m and one of --tokens or -p\nusage: %s\n", usage);
        return CLI_USAGE;
    }
    if (n_predict < 0)
        return cli_failf("-n: cannot generate %lld tokens", (long long)n_predict);
    int32_t *tokens = NULL;
    size_t n = 0;
    sp_error err = {0};
    sp_tokenizer *tok = NULL;
    if (prompt) {
        if (sp_tokenizer_open(tok_path ? tok_path : model_dir, &tok, &err) != SP_OK)
            return cli_fail(&err);
        if (sp_tokenizer_encode_prompt(tok, prompt, strlen(prompt), &tokens, &n, &err) != SP_OK) {
            sp_tokenizer_close(tok);
            return cli_fail(&err);
        }
    } else if (cli_parse_tokens(tokens_s, &tokens, &n) != 0) {
        fprintf(stderr, "specula: --tokens: cannot parse '%s'\n", tokens_s);
        return CLI_USAGE;
    }
    sp_model *m = NULL;
    sp_session *s = NULL;
    int32_t *out = NULL;
    stream_ctx sc = {json, 0, NULL, SP_OK, {0}};
    rc = CLI_OK;
    if (n == 0) {
        rc = cli_failf("--tokens: the prompt is empty");
        goto done;
    }
    /* n_predict may be anything up to INT64_MAX: saturate, then cap to the model */
    int64_t want_ctx = n_ctx;
    if (n_ctx <= 0 && __builtin_add_overflow((int64_t)n, n_predict, &want_ctx))
        want_ctx = INT64_MAX;
    sp_model_params mp = cli_model_params(threads, device);
    if (cli_precision(precision_s, &mp.precision) != CLI_OK)
        return CLI_USAGE;
    if (cli_model_open(model_dir, &mp, &m, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    if (want_ctx > sp_model_n_ctx_max(m)) {
        if ((int64_t)n > sp_model_n_ctx_max(m) || n_ctx > 0) {
            rc = cli_failf("context of %lld tokens exceeds the model's maximum of %lld",
                           (long long)want_ctx, (long long)sp_model_n_ctx_max(m));
            goto done;
        }
        want_ctx = sp_model_n_ctx_max(m);
    }
    sp_session_params sp = {.n_ctx = want_ctx};
    if (sp_session_new(m, &sp, &s, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    if (spec.draft && (rc = cli_spec_open(&spec, m, s, model_dir, tok, want_ctx, &mp)))
        goto done;
    sp_generate_params gp = {.n_predict = n_predict, .ignore_eos = ignore_eos};
    gp.sampling = sp_model_sampling_defaults(m);
    for (cli_opt *o = opts; o->name; o++) {
        if (!o->seen)
            continue;
        if (o->dst == &temp)
            gp.sampling.temperature = (float)temp;
        else if (o->dst == &top_k)
            gp.sampling.top_k = top_k > INT32_MAX ? INT32_MAX : top_k < INT32_MIN ? INT32_MIN : (int32_t)top_k;
        else if (o->dst == &top_p)
            gp.sampling.top_p = (float)top_p;
        else if (o->dst == &min_p)
            gp.sampling.min_p = (float)min_p;
    }
    gp.sampling.seed = seed;
    /* at most the tokens the context can hold (see sp_generate), never n_predict blindly */
    int64_t n_out = want_ctx - (int64_t)n + 1;
    if (n_out > n_predict)
        n_out = n_predict;
    out = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof *out);
    if (!out) {
        rc = cli_failf("out of memory");
        goto done;
    }
    if (tok && !json && sp_detokenizer_new(tok, !special, &sc.detok, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    sp_generate_stats st;
    sp_spec_stats sst;
    sp_status gst = spec.draft ? sp_generate_spec(s, tokens, n, &gp, &spec.params, on_token, &sc, out,
                                                  &st, &sst, &err)
                               : sp_generate(s, tokens, n, &gp, on_token, &sc, out, &st, &err);
    if (sc.status != SP_OK) {
        rc = cli_fail(&sc.err);
        goto done;
    }
    if (gst != SP_OK) {
        if (!json && sc.n)
            printf("\n");
        rc = cli_fail(&err);
        goto done;
    }
    if (json) {
        print_json(out, &st, tok, special, spec.draft ? &sst : NULL);
    } else {
        if (sc.detok) {
            const char *rest;
            size_t rl;
            if (sp_detokenizer_flush(sc.detok, &rest, &rl, &err) == SP_OK)
                fwrite(rest, 1, rl, stdout);
        }
        printf("\n");
        fprintf(stderr, "specula: %lld prompt tokens in %.1f ms, %lld generated in %.1f ms (%s)\n",
                (long long)st.n_prompt, st.prefill_ms, (long long)st.n_generated, st.decode_ms,
                st.stop_reason);
        if (spec.draft)
            cli_spec_print_summary(stderr, &sst);
    }
done:
    cli_spec_close(&spec);
    sp_detokenizer_free(sc.detok);
    sp_tokenizer_close(tok);
    free(out);
    free(tokens);
    sp_session_free(s);
    sp_model_close(m);
    return rc;
}
