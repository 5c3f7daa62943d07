/* cmd_run.c: `specula run [-m DIR] [--draft DIR|ngram|self|mtp|none] [-p TEXT | stdin] [-n N]
 * [--temp T] [--system TEXT] [--raw]`: one reply from a model, the way its users talk to it.
 *
 * The prompt (from -p, else all of stdin) becomes a user message, after a system message
 * when --system is given; the conversation is rendered through the model's chat template
 * with add_generation_prompt true (as `specula template` renders it) and encoded as
 * apply_chat_template(tokenize=True) does. --raw sends the text as `generate -p` does.
 * Without -m, the bundled pair (models/default speculating with models/default-draft; see
 * cli_default_pair for where it is looked up). The reply streams to stdout (thinking dimmed
 * or prefixed, control tokens hidden); one summary line goes to stderr. Ctrl-C ends the
 * reply early. Sampling defaults come from generation_config.json. */
#include "cli.h"
#include "cli_spec.h"
#include "cli_talk.h"
#include "commands.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static char *read_all(FILE *f)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *p = realloc(buf, cap * 2);
            if (!p) {
                free(buf);
                return NULL;
            }
            buf = p;
            cap *= 2;
        }
    }
    if (buf)
        buf[n] = 0;
    return buf;
}

int cmd_run(int argc, char **argv)
{
    const char *model_dir = NULL, *prompt = NULL, *system = NULL;
    int64_t n_predict = 512, top_k = 0, threads = 0, n_ctx = 0;
    double temp = 0, top_p = 1;
    uint64_t seed = 0;
    bool raw = false;
    cli_talk t = {0};
    cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model_dir, "model directory (default: the bundled pair)", 0},
        {"--prompt", "-p", CLI_STR, &prompt, "the user's message (default: stdin)", 0},
        {"--system", NULL, CLI_STR, &system, "a system message before it", 0},
        {"--raw", NULL, CLI_FLAG, &raw, "send the text as it is, without the chat template", 0},
        {"--n-predict", "-n", CLI_INT, &n_predict, "most tokens in the reply (default 512)", 0},
        {"--temp", NULL, CLI_FLOAT, &temp, "temperature; 0 = greedy (default: the model's)", 0},
        {"--top-k", NULL, CLI_INT, &top_k, "keep the k most likely tokens (0 = off)", 0},
        {"--top-p", NULL, CLI_FLOAT, &top_p, "nucleus sampling mass (1 = off)", 0},
        {"--seed", NULL, CLI_U64, &seed, "random seed (default 0)", 0},
        {"--ctx", "-c", CLI_INT, &n_ctx, "context size (default: prompt + n, capped by the model)", 0},
        {"--threads", "-t", CLI_INT, &threads, "worker threads (default: all CPUs)", 0},
        CLI_DEVICE_OPT(t.device),
        {"--precision", NULL, CLI_STR, &t.precision, "matmul arithmetic: fast (bf16 inputs, default) or exact (fp32)", 0},
        CLI_SPEC_OPTS(t.spec),
        {0},
    };
    const char *usage = "specula run [-m DIR] [--draft DIR|ngram|self|mtp|none] [-p TEXT | stdin] [-n N] "
                        "[--temp T] [--system TEXT] [--raw]";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (n_predict < 1)
        return cli_failf("-n: cannot generate %lld tokens", (long long)n_predict);
    char target_buf[4096], draft_buf[4096];
    rc = cli_pick_model(&model_dir, &t.spec.draft, target_buf, draft_buf, sizeof target_buf);
    if (rc)
        return rc;
    char *input = NULL, *text = NULL;
    int32_t *ids = NULL, *out = NULL;
    size_t n_ids = 0;
    cli_reply reply = {0};
    if (!prompt) {
        if (!(input = read_all(stdin)))
            return cli_failf("out of memory");
        size_t n = strlen(input);
        while (n && input[n - 1] == '\n')
            input[--n] = 0;
        prompt = input;
    }
    if ((rc = cli_talk_open_text(&t, model_dir, !raw)))
        goto done;
    sp_error err = {0};
    if (raw) {
        if (sp_tokenizer_encode_prompt(t.tok, prompt, strlen(prompt), &ids, &n_ids, &err) != SP_OK) {
            rc = cli_fail(&err);
            goto done;
        }
    } else {
        cli_msg msgs[2];
        size_t nm = 0;
        if (system)
            msgs[nm++] = (cli_msg){"system", (char *)system};
        msgs[nm++] = (cli_msg){"user", (char *)prompt};
        if ((rc = cli_talk_render(&t, msgs, nm, &text, &ids, &n_ids)))
            goto done;
    }
    if (n_ids == 0) {
        rc = cli_failf("the prompt is empty");
        goto done;
    }
    int64_t want = n_ctx > 0 ? n_ctx : (int64_t)n_ids + n_predict;
    if ((rc = cli_talk_open_model(&t, want, cli_threads(threads))))
        goto done;
    if ((int64_t)n_ids >= t.n_ctx) {
        rc = cli_failf("the prompt (%zu tokens) does not fit the context of %lld", n_ids, (long long)t.n_ctx);
        goto done;
    }
    if (n_predict > t.n_ctx - (int64_t)n_ids)
        n_predict = t.n_ctx - (int64_t)n_ids;
    sp_generate_params gp = {.n_predict = n_predict, .sampling = sp_model_sampling_defaults(t.m)};
    cli_talk_sampling(&gp.sampling, opts, &temp, &top_k, &top_p, &seed);
    if (!(out = malloc((size_t)n_predict * sizeof *out))) {
        rc = cli_failf("out of memory");
        goto done;
    }
    if ((rc = cli_reply_begin(&reply, t.tok, stdout, raw ? NULL : text, &interrupted)))
        goto done;
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sp_generate_stats st;
    sp_spec_stats ss;
    sp_status gst = cli_talk_generate(&t, ids, n_ids, &gp, cli_reply_token, &reply, out, &st, &ss, &err);
    signal(SIGINT, SIG_DFL);
    cli_reply_end(&reply);
    printf("\n");
    fflush(stdout);
    if (reply.status != SP_OK) {
        rc = cli_fail(&reply.err);
        goto done;
    }
    if (gst != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    cli_talk_summary(&t, &st, &ss, "");
done:
    cli_reply_free(&reply);
    cli_talk_close(&t);
    free(out);
    free(ids);
    free(text);
    free(input);
    return rc;
}
