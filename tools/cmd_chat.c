/* cmd_chat.c: `specula chat [-m DIR] [--draft DIR|ngram|self|mtp|none] [--system TEXT]`: a
 * conversation in the terminal, one line per user turn.
 *
 * Each turn the whole history is rendered again through the model's chat template
 * (add_generation_prompt true) and encoded; the KV cache keeps what it already holds of
 * that token sequence: both sessions are truncated to the longest common prefix of the
 * tokens they evaluated and the new ones, and only the rest is evaluated (--verbose shows
 * how many tokens were reused). A reply's thinking is shown (dimmed or prefixed) but kept
 * out of the history, as chat templates expect. /reset forgets the conversation (not the
 * system message), /exit (or end of input) leaves, Ctrl-C stops a reply and keeps what it
 * said. When stdin is not a terminal, turns are read from it and echoed after ">>> ", so a
 * conversation can be scripted and tested. Without -m, the bundled pair. */
#include "cli.h"
#include "cli_spec.h"
#include "cli_talk.h"
#include "commands.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct history {
    cli_msg *m;
    size_t n, cap;
} history;

static int push(history *h, const char *role, const char *content)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 16;
        cli_msg *p = realloc(h->m, cap * sizeof *p);
        if (!p)
            return cli_failf("out of memory");
        h->m = p;
        h->cap = cap;
    }
    h->m[h->n].role = strdup(role);
    h->m[h->n].content = strdup(content ? content : "");
    if (!h->m[h->n].role || !h->m[h->n].content)
        return cli_failf("out of memory");
    h->n++;
    return CLI_OK;
}

static void pop_to(history *h, size_t n)
{
    while (h->n > n) {
        h->n--;
        free(h->m[h->n].role);
        free(h->m[h->n].content);
    }
}

int cmd_chat(int argc, char **argv)
{
    const char *model_dir = NULL, *system = NULL;
    int64_t n_predict = 512, top_k = 0, threads = 0, n_ctx = 0;
    double temp = 0, top_p = 1;
    uint64_t seed = 0;
    bool verbose = false;
    cli_talk t = {0};
    cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model_dir, "model directory (default: the bundled pair)", 0},
        {"--system", NULL, CLI_STR, &system, "a system message that opens the conversation", 0},
        {"--n-predict", "-n", CLI_INT, &n_predict, "most tokens per reply (default 512)", 0},
        {"--temp", NULL, CLI_FLOAT, &temp, "temperature; 0 = greedy (default: the model's)", 0},
        {"--top-k", NULL, CLI_INT, &top_k, "keep the k most likely tokens (0 = off)", 0},
        {"--top-p", NULL, CLI_FLOAT, &top_p, "nucleus sampling mass (1 = off)", 0},
        {"--seed", NULL, CLI_U64, &seed, "random seed of the first reply (default 0; +1 a turn)", 0},
        {"--ctx", "-c", CLI_INT, &n_ctx, "context size (default: the model's, at most 4096)", 0},
        {"--threads", "-t", CLI_INT, &threads, "worker threads (default: all CPUs)", 0},
        CLI_DEVICE_OPT(t.device),
        {"--precision", NULL, CLI_STR, &t.precision, "matmul arithmetic: fast (bf16 inputs, default) or exact (fp32)", 0},
        {"--verbose", "-v", CLI_FLAG, &verbose, "after each reply: cache reuse, tokens/s, acceptance", 0},
        CLI_SPEC_OPTS(t.spec),
        {0},
    };
    const char *usage = "specula chat [-m DIR] [--draft DIR|ngram|self|mtp|none] [--system TEXT] [-n N] "
                        "[--temp T] [--verbose]";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (n_predict < 1)
        return cli_failf("-n: cannot generate %lld tokens", (long long)n_predict);
    char target_buf[4096], draft_buf[4096];
    rc = cli_pick_model(&model_dir, &t.spec.draft, target_buf, draft_buf, sizeof target_buf);
    if (rc)
        return rc;
    history h = {0};
    int32_t *cache = NULL, *ids = NULL, *out = NULL;
    size_t n_cache = 0;
    char *line = NULL, *text = NULL;
    size_t line_cap = 0;
    if ((rc = cli_talk_open_text(&t, model_dir, true)) || (rc = cli_talk_open_model(&t, n_ctx, cli_threads(threads))))
        goto done;
    if (system && (rc = push(&h, "system", system)))
        goto done;
    size_t keep_msgs = h.n;
    bool tty_in = isatty(STDIN_FILENO);
    if (tty_in)
        fprintf(stderr, "specula: chatting with %s%s%s%s; /reset forgets, /exit leaves, Ctrl-C stops a reply\n",
                model_dir, t.spec.draft ? " (draft " : "", t.spec.draft ? t.spec.draft : "", t.spec.draft ? ")" : "");
    if (!(cache = malloc((size_t)t.n_ctx * sizeof *cache)) || !(out = malloc((size_t)t.n_ctx * sizeof *out))) {
        rc = cli_failf("out of memory");
        goto done;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt interrupts the read */
    sigaction(SIGINT, &sa, NULL);
    for (int64_t turn = 0;; turn++) {
        if (tty_in) {
            printf(">>> ");
            fflush(stdout);
        }
        interrupted = 0;
        errno = 0;
        ssize_t len = getline(&line, &line_cap, stdin);
        if (len < 0) {
            if (errno == EINTR && interrupted) { /* Ctrl-C at the prompt */
                clearerr(stdin);
                printf("\n(/exit or Ctrl-D leaves)\n");
                continue;
            }
            if (tty_in)
                printf("\n");
            break;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (!tty_in)
            printf(">>> %s\n", line);
        if (len == 0)
            continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/bye") || !strcmp(line, "/quit"))
            break;
        if (!strcmp(line, "/reset")) {
            pop_to(&h, keep_msgs);
            n_cache = (size_t)cli_talk_truncate(&t, 0);
            printf("(conversation reset)\n");
            continue;
        }
        if (line[0] == '/' && strchr("abcdefghijklmnopqrstuvwxyz?", line[1])) {
            printf("(commands: /reset, /exit)\n");
            continue;
        }
        size_t before = h.n;
        if ((rc = push(&h, "user", line)))
            goto done;
        free(text);
        free(ids);
        text = NULL;
        ids = NULL;
        size_t n_ids = 0;
        if ((rc = cli_talk_render(&t, h.m, h.n, &text, &ids, &n_ids)))
            goto done;
        if (n_ids == 0 || (int64_t)n_ids + 1 >= t.n_ctx) {
            fprintf(stderr, "specula: the conversation (%zu tokens) fills the context of %lld: /reset\n", n_ids,
                    (long long)t.n_ctx);
            pop_to(&h, before);
            continue;
        }
        /* keep the cached prefix the new rendering shares; evaluate at least one token */
        size_t p = 0;
        while (p < n_cache && p < n_ids && cache[p] == ids[p])
            p++;
        if (p == n_ids)
            p--;
        p = (size_t)cli_talk_truncate(&t, (int64_t)p);
        int64_t room = t.n_ctx - (int64_t)n_ids;
        sp_generate_params gp = {.n_predict = n_predict < room ? n_predict : room,
                                 .sampling = sp_model_sampling_defaults(t.m)};
        uint64_t turn_seed = seed + (uint64_t)turn;
        cli_talk_sampling(&gp.sampling, opts, &temp, &top_k, &top_p, &turn_seed);
        cli_reply reply;
        if ((rc = cli_reply_begin(&reply, t.tok, stdout, text, &interrupted)))
            goto done;
        sp_generate_stats st;
        sp_spec_stats ss;
        sp_error err = {0};
        sp_status gst = cli_talk_generate(&t, ids + p, n_ids - p, &gp, cli_reply_token, &reply, out, &st, &ss, &err);
        cli_reply_end(&reply);
        printf("\n");
        fflush(stdout);
        if (reply.status != SP_OK || gst != SP_OK) {
            rc = cli_fail(reply.status != SP_OK ? &reply.err : &err);
            cli_reply_free(&reply);
            goto done;
        }
        if (interrupted)
            printf("(stopped)\n");
        rc = push(&h, "assistant", reply.final ? reply.final : "");
        cli_reply_free(&reply);
        if (rc)
            goto done;
        /* what the sessions now hold: the prompt, then the reply's tokens */
        memcpy(cache, ids, n_ids * sizeof *ids);
        n_cache = n_ids;
        for (int64_t i = 0; i < st.n_generated && n_cache < (size_t)t.n_ctx; i++)
            cache[n_cache++] = out[i];
        int64_t held = sp_session_n_past(t.s);
        if ((int64_t)n_cache > held)
            n_cache = (size_t)held;
        if (verbose) {
            char lead[160];
            snprintf(lead, sizeof lead, "prompt %zu tokens: %zu reused from the KV cache, %zu evaluated; ", n_ids, p,
                     n_ids - p);
            cli_talk_summary(&t, &st, &ss, lead);
        }
    }
done:
    signal(SIGINT, SIG_DFL);
    pop_to(&h, 0);
    free(h.m);
    free(cache);
    free(out);
    free(ids);
    free(text);
    free(line);
    cli_talk_close(&t);
    return rc;
}
