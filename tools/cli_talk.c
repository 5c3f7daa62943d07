/* cli_talk.c: talking to a model through its chat template (see cli_talk.h). */
#include "cli_talk.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef SPECULA_SOURCE_DIR
#define SPECULA_SOURCE_DIR "."
#endif

static bool has_pair(const char *models)
{
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/default/config.json", models);
    return stat(p, &st) == 0;
}

bool cli_default_pair(char *target, size_t target_size, char *draft, size_t draft_size)
{
    const char *env = getenv("SPECULA_MODELS");
    const char *cands[] = {env && *env ? env : NULL, "models", SPECULA_SOURCE_DIR "/models"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        if (!cands[i] || !has_pair(cands[i]))
            continue;
        snprintf(target, target_size, "%s/default", cands[i]);
        snprintf(draft, draft_size, "%s/default-draft", cands[i]);
        return true;
    }
    return false;
}

int cli_pick_model(const char **model_dir, const char **draft, char *target_buf,
                   char *draft_buf, size_t buf_size)
{
    if (!*model_dir) {
        if (!cli_default_pair(target_buf, buf_size, draft_buf, buf_size))
            return cli_failf("no -m and no bundled pair (models/default) in $SPECULA_MODELS, "
                             "./models or the source tree");
        *model_dir = target_buf;
        if (!*draft)
            *draft = draft_buf;
    }
    if (*draft && !strcmp(*draft, "none"))
        *draft = NULL;
    return CLI_OK;
}

int cli_talk_open_text(cli_talk *t, const char *dir, bool need_template)
{
    sp_error err = {0};
    t->dir = dir;
    if (sp_tokenizer_open(dir, &t->tok, &err) != SP_OK)
        return cli_fail(&err);
    if (sp_chat_open(dir, &t->chat, &err) != SP_OK) {
        t->chat = NULL;
        if (need_template)
            return cli_failf("%s has no usable chat template (%s); --raw sends the text as it is", dir,
                             err.msg);
    }
    return CLI_OK;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int cli_talk_open_model(cli_talk *t, int64_t n_ctx, int threads)
{
    sp_error err = {0};
    bool show = isatty(STDERR_FILENO);
    double t0 = now_ms();
    if (show)
        fprintf(stderr, "specula: loading %s%s%s ...", t->dir, t->spec.draft ? " with draft " : "",
                t->spec.draft ? t->spec.draft : "");
    sp_model_params mp = cli_model_params(threads, t->device);
    mp.n_ctx = n_ctx;
    if (cli_precision(t->precision, &mp.precision) != CLI_OK)
        return CLI_USAGE;
    if (sp_model_open(t->dir, &mp, &t->m, &err) != SP_OK) {
        if (show)
            fprintf(stderr, "\n");
        return cli_fail(&err);
    }
    int64_t max = sp_model_n_ctx_max(t->m);
    if (n_ctx <= 0)
        n_ctx = max < 4096 ? max : 4096;
    if (n_ctx > max)
        n_ctx = max;
    t->n_ctx = n_ctx;
    sp_session_params sp = {.n_ctx = n_ctx};
    if (sp_session_new(t->m, &sp, &t->s, &err) != SP_OK) {
        if (show)
            fprintf(stderr, "\n");
        return cli_fail(&err);
    }
    if (t->spec.draft) {
        int rc = cli_spec_open(&t->spec, t->m, t->s, t->dir, t->tok, n_ctx, &mp);
        if (rc) {
            if (show)
                fprintf(stderr, "\n");
            return rc;
        }
        /* a conversation wants the faster of speculation and plain steps (greedy replies
         * are the same either way; sampled ones keep the acceptance gate only) */
        t->spec.params.cost_gate = true;
    }
    if (show)
        fprintf(stderr, " ready (%s on %s, %.1f MiB of weights, %.0f ms)\n", sp_model_arch_name(t->m),
                sp_model_device(t->m), (double)sp_model_weight_bytes(t->m) / 1048576.0, now_ms() - t0);
    return CLI_OK;
}

void cli_talk_close(cli_talk *t)
{
    cli_spec_close(&t->spec);
    sp_session_free(t->s);
    sp_model_close(t->m);
    sp_chat_close(t->chat);
    sp_tokenizer_close(t->tok);
    t->s = NULL;
    t->m = NULL;
    t->chat = NULL;
    t->tok = NULL;
}

/* A JSON string literal of s. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

int cli_talk_render(cli_talk *t, const cli_msg *msgs, size_t n_msgs, char **text, int32_t **ids,
                    size_t *n_ids)
{
    sp_error err = {0};
    char *ctx = NULL;
    size_t ctx_len = 0;
    FILE *f = open_memstream(&ctx, &ctx_len);
    if (!f)
        return cli_failf("out of memory");
    fputs("{\"messages\": [", f);
    for (size_t i = 0; i < n_msgs; i++) {
        fputs(i ? ", {\"role\": " : "{\"role\": ", f);
        json_str(f, msgs[i].role);
        fputs(", \"content\": ", f);
        json_str(f, msgs[i].content);
        fputs("}", f);
    }
    fputs("], \"add_generation_prompt\": true}", f);
    fclose(f);
    size_t len;
    sp_status st = sp_chat_render(t->chat, ctx, ctx_len, NULL, text, &len, &err);
    free(ctx);
    if (st != SP_OK)
        return cli_fail(&err);
    /* apply_chat_template(tokenize=True): the rendered text already holds the specials */
    if (sp_tokenizer_encode(t->tok, *text, len, false, ids, n_ids, &err) != SP_OK) {
        free(*text);
        *text = NULL;
        return cli_fail(&err);
    }
    return CLI_OK;
}

sp_status cli_talk_generate(cli_talk *t, const int32_t *ids, size_t n_ids, const sp_generate_params *gp,
                            sp_token_fn on_token, void *ctx, int32_t *out, sp_generate_stats *st,
                            sp_spec_stats *ss, sp_error *err)
{
    memset(ss, 0, sizeof *ss);
    if (t->spec.draft)
        return sp_generate_spec(t->s, ids, n_ids, gp, &t->spec.params, on_token, ctx, out, st, ss, err);
    return sp_generate(t->s, ids, n_ids, gp, on_token, ctx, out, st, err);
}

int64_t cli_talk_truncate(cli_talk *t, int64_t n)
{
    int64_t have = sp_session_n_past(t->s);
    bool follows = t->spec.params.kind == SP_DRAFT_MTP; /* an MTP session follows its target */
    if (t->spec.draft_session && !follows) {
        int64_t d = sp_session_n_past(t->spec.draft_session);
        have = d < have ? d : have;
    }
    if (n > have)
        n = have;
    sp_session_truncate(t->s, n, NULL);
    if (t->spec.draft_session && !follows)
        sp_session_truncate(t->spec.draft_session, n, NULL);
    return n;
}

void cli_talk_summary(const cli_talk *t, const sp_generate_stats *st, const sp_spec_stats *ss, const char *lead)
{
    double tps = st->decode_ms > 0 && st->n_generated > 1 ? (double)(st->n_generated - 1) / (st->decode_ms / 1e3) : 0;
    fprintf(stderr, "specula: %s%lld tokens, %.1f tok/s (prompt %lld tokens in %.0f ms, %s)", lead,
            (long long)st->n_generated, tps, (long long)st->n_prompt, st->prefill_ms, st->stop_reason);
    if (t->spec.draft)
        fprintf(stderr, "; draft %s: mean acceptance length %.2f, %.0f%% of %lld draft tokens accepted",
                t->spec.draft, ss->drafts ? 1.0 + (double)ss->accepted / (double)ss->drafts : 0.0,
                ss->drafted ? 100.0 * (double)ss->accepted / (double)ss->drafted : 0.0, (long long)ss->drafted);
    fprintf(stderr, "\n");
}

/* Applies --temp/--top-k/--top-p/--seed over the model's defaults. */
void cli_talk_sampling(sp_sampling_params *sp, const cli_opt *opts, const double *temp, const int64_t *top_k,
                       const double *top_p, const uint64_t *seed)
{
    for (const cli_opt *o = opts; o->name; o++) {
        if (!o->seen)
            continue;
        if (o->dst == temp)
            sp->temperature = (float)*temp;
        else if (o->dst == top_k)
            sp->top_k = (int32_t)*top_k;
        else if (o->dst == top_p)
            sp->top_p = (float)*top_p;
    }
    sp->seed = *seed;
}

/* ---- showing a reply ------------------------------------------------------------------- */

int cli_reply_begin(cli_reply *r, sp_tokenizer *tok, FILE *out, const char *prompt_text,
                    volatile sig_atomic_t *stop)
{
    memset(r, 0, sizeof *r);
    r->tok = tok;
    r->out = out;
    r->tty = isatty(fileno(out));
    r->stop = stop;
    sp_error err = {0};
    if (sp_detokenizer_new(tok, false, &r->detok, &err) != SP_OK)
        return cli_fail(&err);
    if (prompt_text) {
        size_t n = strlen(prompt_text);
        while (n && (prompt_text[n - 1] == '\n' || prompt_text[n - 1] == ' '))
            n--;
        if (n >= 7 && !memcmp(prompt_text + n - 7, "<think>", 7)) {
            r->thinking = true;
            fputs(r->tty ? "\033[2m" : "thinking: ", r->out);
        }
    }
    return CLI_OK;
}

static void set_thinking(cli_reply *r, bool on)
{
    if (on == r->thinking)
        return;
    r->thinking = on;
    if (on)
        fputs(r->tty ? "\033[2m" : "thinking: ", r->out);
    else
        fputs(r->tty ? "\033[0m\n" : "\n", r->out);
}

static void keep(cli_reply *r, const char *s, size_t n)
{
    if (!r->final_len)
        while (n && (*s == '\n' || *s == ' ')) { /* the reply starts at its first word */
            s++;
            n--;
        }
    if (r->final_len + n + 1 > r->final_cap) {
        size_t cap = (r->final_cap ? r->final_cap * 2 : 256) + n;
        char *p = realloc(r->final, cap);
        if (!p)
            return;
        r->final = p;
        r->final_cap = cap;
    }
    memcpy(r->final + r->final_len, s, n);
    r->final_len += n;
    r->final[r->final_len] = 0;
}

/* Control tokens: "<|...|>" added tokens, <think> and </think>. */
static bool is_control(const char *s, size_t n)
{
    if (n >= 4 && s[0] == '<' && s[1] == '|' && s[n - 2] == '|' && s[n - 1] == '>')
        return true;
    return (n == 7 && !memcmp(s, "<think>", 7)) || (n == 8 && !memcmp(s, "</think>", 8));
}

static bool tok_is(const char *s, size_t n, const char *lit)
{
    return n == strlen(lit) && !memcmp(s, lit, n);
}

bool cli_reply_token(void *ctx, int32_t token)
{
    cli_reply *r = ctx;
    r->n_tokens++;
    size_t n = 0;
    const char *s = sp_tokenizer_id_to_token(r->tok, token, &n);
    if (s && is_control(s, n)) {
        if (tok_is(s, n, "<think>")) {
            set_thinking(r, true);
        } else if (tok_is(s, n, "</think>")) {
            set_thinking(r, false);
        } else if (tok_is(s, n, "<|start|>")) { /* harmony: a role header follows */
            r->mode = 1;
        } else if (tok_is(s, n, "<|channel|>")) {
            r->mode = 2;
            r->channel_len = 0;
        } else if (tok_is(s, n, "<|message|>")) {
            if (r->mode == 2)
                set_thinking(r, !(r->channel_len >= 5 && !memcmp(r->channel, "final", 5)));
            r->mode = 0;
        } else if (tok_is(s, n, "<|end|>")) {
            set_thinking(r, false);
        }
        fflush(r->out);
        return !(r->stop && *r->stop);
    }
    const char *piece;
    size_t len;
    r->status = sp_detokenizer_push(r->detok, token, &piece, &len, &r->err);
    if (r->status != SP_OK)
        return false;
    if (r->mode == 2) {
        for (size_t i = 0; i < len && r->channel_len + 1 < sizeof r->channel; i++)
            r->channel[r->channel_len++] = piece[i];
    } else if (r->mode == 0) {
        fwrite(piece, 1, len, r->out);
        if (!r->thinking)
            keep(r, piece, len);
    }
    fflush(r->out);
    return !(r->stop && *r->stop);
}

void cli_reply_end(cli_reply *r)
{
    const char *rest;
    size_t len;
    sp_error err = {0};
    if (r->detok && sp_detokenizer_flush(r->detok, &rest, &len, &err) == SP_OK && len && r->mode == 0) {
        fwrite(rest, 1, len, r->out);
        if (!r->thinking)
            keep(r, rest, len);
    }
    if (r->thinking && r->tty)
        fputs("\033[0m", r->out);
    r->thinking = false;
    fflush(r->out);
}

void cli_reply_free(cli_reply *r)
{
    sp_detokenizer_free(r->detok);
    free(r->final);
    r->detok = NULL;
    r->final = NULL;
}
