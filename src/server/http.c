/* http.c: the HTTP side of `specula serve` on libmicrohttpd (thread per connection).
 *
 * A request's life: the first call of the access handler routes it (404 / 405), checks
 * the API key (401) and the declared body size (413); body bytes accumulate up to
 * --max-body; the last call parses and answers. Generation requests become an sp_seq
 * submitted to the scheduler (429 / 503 when it is full or draining). A non-streamed
 * answer waits in the handler; a stream is a callback response that waits for text and
 * writes server-sent events. Both poll the socket while waiting: a client that goes away
 * cancels its sequence within ~50 ms. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "server.h"

#include "chat_output.h"
#include "openai_request.h"
#include "openai_response.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WAIT_SLICE_MS 50

typedef enum route {
    R_NONE, R_HEALTH, R_METRICS, R_MODELS, R_CHAT, R_COMPLETIONS, R_TOKENIZE, R_DETOKENIZE
} route;

typedef struct conn_state {
    route r;
    int early_status; /* answer at the first call: 401 404 405 413 503 */
    const char *early_msg;
    sp_strbuf body;
    bool too_big;
    bool counted; /* in srv->n_active until the response is sent */
} conn_state;

static const struct {
    const char *path;
    const char *method;
    route r;
} routes[] = {
    {"/health", "GET", R_HEALTH},
    {"/metrics", "GET", R_METRICS},
    {"/v1/models", "GET", R_MODELS},
    {"/v1/chat/completions", "POST", R_CHAT},
    {"/v1/completions", "POST", R_COMPLETIONS},
    {"/tokenize", "POST", R_TOKENIZE},
    {"/detokenize", "POST", R_DETOKENIZE},
};

/* ---- plumbing ------------------------------------------------------------------------ */

static enum MHD_Result send_text(sp_server *srv, struct MHD_Connection *c, int status,
                                 const char *type, char *text, size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    if (status == 429 || status == 503)
        MHD_add_response_header(resp, "Retry-After", "1");
    if (status == 405)
        MHD_add_response_header(resp, "Allow", "GET, POST");
    if (status == 401)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    sp_metrics_request(srv->metrics, status);
    return rc;
}

static enum MHD_Result send_json(sp_server *srv, struct MHD_Connection *c, int status, cJSON *j)
{
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s)
        return MHD_NO;
    return send_text(srv, c, status, "application/json", s, strlen(s));
}

static enum MHD_Result send_error(sp_server *srv, struct MHD_Connection *c, int status,
                                  const char *msg, const char *param)
{
    return send_json(srv, c, status, sp_oai_error(status, msg, param));
}

/* Whether the client closed its end (or the socket failed). */
static bool peer_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL))
        return true;
    if (p.revents & POLLIN) {
        char ch;
        return recv(ci->connect_fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }
    return false;
}

static void make_id(sp_server *srv, const char *prefix, char *out, size_t n)
{
    uint64_t id = atomic_fetch_add(&srv->next_id, 1);
    snprintf(out, n, "%s%016llx", prefix, (unsigned long long)id);
}

/* ---- prompts ------------------------------------------------------------------------- */

typedef struct prepared {
    int32_t *ids;
    size_t n_ids;
    char *prompt_text; /* chat: the rendered prompt (for the output format) */
    size_t prompt_len;
} prepared;

/* Renders / tokenizes the request's prompt. Returns 0 or an HTTP status with *msg set. */
static int prepare_prompt(sp_server *srv, const sp_oai_request *req, prepared *p, char *msg,
                          size_t msg_n)
{
    sp_error err = {0};
    sp_status st = SP_OK;
    pthread_mutex_lock(&srv->text_mu);
    if (req->kind == SP_OAI_CHAT) {
        if (!srv->chat) {
            pthread_mutex_unlock(&srv->text_mu);
            snprintf(msg, msg_n, "this model has no chat template; use /v1/completions");
            return 400;
        }
        st = sp_chat_render(srv->chat, req->chat_context, strlen(req->chat_context), NULL,
                            &p->prompt_text, &p->prompt_len, &err);
        if (st == SP_OK)
            st = sp_tokenizer_encode(srv->tok, p->prompt_text, p->prompt_len, false, &p->ids,
                                     &p->n_ids, &err);
    } else if (req->prompt) {
        st = sp_tokenizer_encode_prompt(srv->tok, req->prompt, req->prompt_len, &p->ids,
                                        &p->n_ids, &err);
    } else {
        p->ids = malloc(req->n_prompt_ids * sizeof *p->ids);
        if (!p->ids) {
            st = SP_ERR_NOMEM;
        } else {
            memcpy(p->ids, req->prompt_ids, req->n_prompt_ids * sizeof *p->ids);
            p->n_ids = req->n_prompt_ids;
            for (size_t i = 0; i < p->n_ids; i++)
                if (p->ids[i] >= sp_model_n_vocab(srv->model)) {
                    snprintf(err.msg, sizeof err.msg,
                             "'prompt'[%zu]: token id %d is not below the vocabulary size %lld", i,
                             p->ids[i], (long long)sp_model_n_vocab(srv->model));
                    st = SP_ERR_INVALID_ARG;
                    break;
                }
        }
    }
    pthread_mutex_unlock(&srv->text_mu);
    if (st != SP_OK) {
        snprintf(msg, msg_n, "%s%s", st == SP_ERR_TEMPLATE || st == SP_ERR_LIMIT ?
                 "chat template error: " : "", err.msg);
        return st == SP_ERR_NOMEM ? 500 : 400;
    }
    if (p->n_ids == 0) {
        snprintf(msg, msg_n, "the prompt is empty");
        return 400;
    }
    return 0;
}

static void prepared_fini(prepared *p)
{
    free(p->ids);
    free(p->prompt_text);
}

/* ---- generation ---------------------------------------------------------------------- */

typedef struct gen {
    sp_server *srv;
    struct MHD_Connection *conn;
    sp_seq *seq;
    sp_oai_kind kind;
    char id[64];
    int64_t created;
    bool include_usage, logprobs;
    char *echo; /* completions: the prompt text, echoed before the answer */
    sp_chat_format fmt;
    bool parse; /* chat output through chat_output.c */
    /* streaming */
    sp_chat_parser *parser;
    sp_chat_delta delta;
    size_t text_seen, toks_seen, calls_sent;
    bool sent_role, finished;
    bool any_call;
    size_t text_offset;
    sp_strbuf out;
    size_t out_pos;
} gen;

static void gen_free(gen *g)
{
    if (!g)
        return;
    if (g->seq) {
        sp_sched_cancel(g->srv->sched, g->seq);
        sp_seq_release(g->srv->sched, g->seq);
    }
    sp_chat_parser_free(g->parser);
    sp_chat_delta_free(&g->delta);
    sp_strbuf_free(&g->out);
    free(g->echo);
    free(g);
}

static const char *finish_name(const char *reason, bool calls)
{
    if (reason && strcmp(reason, "stop") == 0 && calls)
        return "tool_calls";
    return reason && strcmp(reason, "length") == 0 ? "length" : "stop";
}

static sp_oai_tokens token_namer(sp_server *srv)
{
    sp_oai_tokens t = {srv->tok, &srv->text_mu};
    return t;
}

/* Snapshot of a sequence's progress, copied under the scheduler lock. */
typedef struct snapshot {
    char *text;
    size_t text_len;
    sp_seq_token *toks;
    size_t n_toks;
    bool done;
    const char *reason;
    char error[SP_ERROR_MSG_BYTES];
    int64_t n_prompt, n_generated;
} snapshot;

static bool take_snapshot(gen *g, size_t text_from, size_t toks_from, int wait_ms, snapshot *s)
{
    sp_seq *q = g->seq;
    memset(s, 0, sizeof *s);
    sp_sched_lock(g->srv->sched);
    if (wait_ms > 0)
        sp_sched_wait_locked(g->srv->sched, q, text_from, toks_from, wait_ms);
    bool ok = true;
    s->text_len = q->text_len - text_from;
    s->text = malloc(s->text_len + 1);
    s->n_toks = q->n_toks - toks_from;
    s->toks = s->n_toks ? malloc(s->n_toks * sizeof *s->toks) : NULL;
    if (!s->text || (s->n_toks && !s->toks)) {
        ok = false;
    } else {
        memcpy(s->text, q->text ? q->text + text_from : "", s->text_len);
        s->text[s->text_len] = 0;
        if (s->n_toks)
            memcpy(s->toks, q->toks + toks_from, s->n_toks * sizeof *s->toks);
    }
    s->done = q->done;
    s->reason = q->finish_reason;
    memcpy(s->error, q->error, sizeof s->error);
    s->n_prompt = (int64_t)q->n_prompt;
    s->n_generated = q->n_generated;
    sp_sched_unlock(g->srv->sched);
    return ok;
}

static void snapshot_fini(snapshot *s)
{
    free(s->text);
    free(s->toks);
}

/* The whole answer of a finished sequence. */
static cJSON *final_response(gen *g, const snapshot *s)
{
    sp_server *srv = g->srv;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", g->id);
    cJSON_AddStringToObject(root, "object",
                            g->kind == SP_OAI_CHAT ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(root, "created", (double)g->created);
    cJSON_AddStringToObject(root, "model", srv->model_id);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", 0);
    sp_oai_tokens names = token_namer(srv);
    bool calls = false;
    if (g->kind == SP_OAI_CHAT) {
        sp_chat_delta d = {0};
        if (g->parse) {
            sp_chat_parser *p = sp_chat_parser_new(&g->fmt);
            if (p)
                sp_chat_parser_feed(p, s->text, s->text_len, true, &d);
            sp_chat_parser_free(p);
        } else {
            sp_strbuf_add(&d.content, s->text, s->text_len);
        }
        calls = d.n_calls > 0;
        cJSON *msg = sp_oai_chat_message(&d, true, false, strchr(g->id, '-') + 1, 0);
        if (calls && d.content.len == 0)
            cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", cJSON_CreateNull());
        cJSON_AddItemToObject(ch, "message", msg);
        sp_chat_delta_free(&d);
        if (g->logprobs)
            cJSON_AddItemToObject(ch, "logprobs", sp_oai_chat_logprobs(&names, s->toks, s->n_toks));
        else
            cJSON_AddNullToObject(ch, "logprobs");
    } else {
        size_t el = g->echo ? strlen(g->echo) : 0;
        char *text = malloc(el + s->text_len + 1);
        if (text) {
            memcpy(text, g->echo ? g->echo : "", el);
            memcpy(text + el, s->text, s->text_len);
            text[el + s->text_len] = 0;
        }
        cJSON_AddStringToObject(ch, "text", text ? text : "");
        free(text);
        if (g->logprobs)
            cJSON_AddItemToObject(ch, "logprobs",
                                  sp_oai_completion_logprobs(&names, s->toks, s->n_toks, el));
        else
            cJSON_AddNullToObject(ch, "logprobs");
    }
    cJSON_AddStringToObject(ch, "finish_reason", finish_name(s->reason, calls));
    cJSON_AddItemToArray(choices, ch);
    cJSON_AddItemToObject(root, "usage", sp_oai_usage(s->n_prompt, s->n_generated));
    return root;
}

static bool sse_add(gen *g, cJSON *j)
{
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s)
        return false;
    bool ok = sp_strbuf_add(&g->out, "data: ", 6) && sp_strbuf_add(&g->out, s, strlen(s)) &&
              sp_strbuf_add(&g->out, "\n\n", 2);
    free(s);
    return ok;
}

static cJSON *stream_choice(gen *g, cJSON *delta_or_text, cJSON *logprobs, const char *finish)
{
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", 0);
    if (g->kind == SP_OAI_CHAT)
        cJSON_AddItemToObject(ch, "delta", delta_or_text);
    else
        cJSON_AddItemToObject(ch, "text", delta_or_text);
    if (logprobs)
        cJSON_AddItemToObject(ch, "logprobs", logprobs);
    else
        cJSON_AddNullToObject(ch, "logprobs");
    if (finish)
        cJSON_AddStringToObject(ch, "finish_reason", finish);
    else
        cJSON_AddNullToObject(ch, "finish_reason");
    return ch;
}

/* Waits a slice for progress and appends the events it makes to g->out. */
static bool stream_produce(gen *g)
{
    sp_server *srv = g->srv;
    const char *object = g->kind == SP_OAI_CHAT ? "chat.completion.chunk" : "text_completion";
    if (!g->sent_role && g->kind == SP_OAI_CHAT) {
        g->sent_role = true;
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "role", "assistant");
        cJSON_AddStringToObject(d, "content", "");
        return sse_add(g, sp_oai_chunk(object, g->id, g->created, srv->model_id,
                                       stream_choice(g, d, NULL, NULL)));
    }
    snapshot s;
    if (!take_snapshot(g, g->text_seen, g->toks_seen, WAIT_SLICE_MS, &s)) {
        snapshot_fini(&s);
        return false;
    }
    g->text_seen += s.text_len;
    g->toks_seen += s.n_toks;
    sp_oai_tokens names = token_namer(srv);
    bool ok = true;
    if (s.done && s.reason && strcmp(s.reason, "error") == 0) {
        ok = sse_add(g, sp_oai_error(500, s.error, NULL));
    } else if (s.done && s.reason && strcmp(s.reason, "cancelled") == 0) {
        ok = sse_add(g, sp_oai_error(503, "the request was cancelled: the server is shutting down",
                                     NULL));
    } else if (s.text_len || s.n_toks || s.done) {
        cJSON *lp = NULL;
        if (g->logprobs && s.n_toks)
            lp = g->kind == SP_OAI_CHAT
                     ? sp_oai_chat_logprobs(&names, s.toks, s.n_toks)
                     : sp_oai_completion_logprobs(&names, s.toks, s.n_toks, g->text_offset);
        if (g->kind == SP_OAI_CHAT) {
            sp_chat_delta_clear(&g->delta);
            if (g->parse)
                ok = sp_chat_parser_feed(g->parser, s.text, s.text_len, s.done, &g->delta);
            else
                ok = sp_strbuf_add(&g->delta.content, s.text, s.text_len);
            if (g->delta.content.len || g->delta.reasoning.len || g->delta.n_calls || lp) {
                cJSON *d = sp_oai_chat_message(&g->delta, false, true, strchr(g->id, '-') + 1, g->calls_sent);
                g->calls_sent += g->delta.n_calls;
                ok = ok && sse_add(g, sp_oai_chunk(object, g->id, g->created, srv->model_id,
                                                   stream_choice(g, d, lp, NULL)));
                lp = NULL;
            }
        } else if (s.text_len || lp) {
            g->text_offset += s.text_len;
            ok = sse_add(g, sp_oai_chunk(object, g->id, g->created, srv->model_id,
                                         stream_choice(g, cJSON_CreateString(s.text), lp, NULL)));
            lp = NULL;
        }
        cJSON_Delete(lp);
        if (s.done) {
            cJSON *last = g->kind == SP_OAI_CHAT ? cJSON_CreateObject() : cJSON_CreateString("");
            ok = ok && sse_add(g, sp_oai_chunk(object, g->id, g->created, srv->model_id,
                                               stream_choice(g, last, NULL,
                                                             finish_name(s.reason, g->calls_sent > 0))));
            if (g->include_usage) {
                cJSON *u = sp_oai_chunk(object, g->id, g->created, srv->model_id, NULL);
                cJSON_AddItemToObject(u, "usage", sp_oai_usage(s.n_prompt, s.n_generated));
                ok = ok && sse_add(g, u);
            }
        }
    }
    if (s.done) {
        ok = ok && sp_strbuf_add(&g->out, "data: [DONE]\n\n", 14);
        g->finished = true;
    }
    snapshot_fini(&s);
    return ok;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    gen *g = cls;
    (void)pos;
    while (g->out_pos == g->out.len) {
        g->out.len = g->out_pos = 0;
        if (g->finished)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (!stream_produce(g))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (g->out.len == 0 && peer_gone(g->conn))
            return MHD_CONTENT_READER_END_WITH_ERROR; /* gen_free cancels the sequence */
    }
    size_t n = g->out.len - g->out_pos;
    if (n > max)
        n = max;
    memcpy(buf, g->out.p + g->out_pos, n);
    g->out_pos += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) { gen_free(cls); }

static enum MHD_Result handle_generate(sp_server *srv, struct MHD_Connection *c, sp_oai_kind kind,
                                       const char *body, size_t len)
{
    sp_oai_request req;
    sp_error err = {0};
    const char *param = NULL;
    char msg[1280];
    prepared p = {0};
    gen *g = NULL;
    enum MHD_Result rc;
    if (sp_oai_request_parse(kind, body, len, &req, &param, &err) != SP_OK) {
        rc = send_error(srv, c, 400, err.msg, param);
        goto done;
    }
    int status = prepare_prompt(srv, &req, &p, msg, sizeof msg);
    if (status) {
        rc = send_error(srv, c, status, msg, kind == SP_OAI_CHAT ? "messages" : "prompt");
        goto done;
    }
    int64_t n_prompt = (int64_t)p.n_ids;
    if (n_prompt >= srv->n_ctx) {
        snprintf(msg, sizeof msg, "This model's maximum context length is %lld tokens. However, "
                 "your %s resulted in %lld tokens (at least one more is needed to generate).",
                 (long long)srv->n_ctx, kind == SP_OAI_CHAT ? "messages" : "prompt",
                 (long long)n_prompt);
        rc = send_error(srv, c, 400, msg, kind == SP_OAI_CHAT ? "messages" : "prompt");
        goto done;
    }
    if (req.max_tokens > 0 && n_prompt + req.max_tokens > srv->n_ctx) {
        snprintf(msg, sizeof msg, "This model's maximum context length is %lld tokens. However, "
                 "you requested %lld tokens (%lld in the %s, %lld for the completion).",
                 (long long)srv->n_ctx, (long long)(n_prompt + req.max_tokens), (long long)n_prompt,
                 kind == SP_OAI_CHAT ? "messages" : "prompt", (long long)req.max_tokens);
        rc = send_error(srv, c, 400, msg, "max_tokens");
        goto done;
    }
    g = calloc(1, sizeof *g);
    if (!g) {
        rc = MHD_NO;
        goto done;
    }
    g->srv = srv;
    g->conn = c;
    g->kind = kind;
    g->created = (int64_t)time(NULL);
    make_id(srv, kind == SP_OAI_CHAT ? "chatcmpl-" : "cmpl-", g->id, sizeof g->id);
    g->include_usage = req.include_usage;
    g->logprobs = req.logprobs;
    if (kind == SP_OAI_CHAT) {
        g->fmt = sp_chat_format_detect(srv->tok, p.prompt_text, p.prompt_len, req.has_tools);
        g->parse = sp_chat_format_keeps_special(&g->fmt);
    } else if (req.echo && req.prompt) {
        g->echo = strdup(req.prompt);
    }
    sp_seq *q = sp_seq_new(p.ids, p.n_ids);
    if (!q) {
        rc = MHD_NO;
        goto done;
    }
    p.ids = NULL;
    g->seq = q;
    /* OpenAI's defaults: 16 for completions, the rest of the context for chat */
    q->max_tokens = req.max_tokens > 0 ? req.max_tokens
                    : kind == SP_OAI_COMPLETION && srv->n_ctx - n_prompt > 16 ? 16
                                                                                : srv->n_ctx - n_prompt;
    q->sampling = srv->defaults;
    if (req.set_temperature)
        q->sampling.temperature = req.sampling.temperature;
    if (req.set_top_p)
        q->sampling.top_p = req.sampling.top_p;
    if (req.set_top_k)
        q->sampling.top_k = req.sampling.top_k;
    if (req.set_min_p)
        q->sampling.min_p = req.sampling.min_p;
    q->sampling.seed = req.set_seed ? req.sampling.seed : 0;
    for (size_t i = 0; i < req.n_stop; i++) {
        q->stop[i] = req.stop[i];
        req.stop[i] = NULL;
    }
    q->n_stop = req.n_stop;
    req.n_stop = 0;
    q->logprobs = req.logprobs;
    q->n_top = req.top_logprobs;
    q->ignore_eos = req.ignore_eos;
    q->keep_special = g->parse;
    if (req.stream) {
        g->parser = g->parse ? sp_chat_parser_new(&g->fmt) : NULL;
        if (g->parse && !g->parser) {
            rc = MHD_NO;
            goto done;
        }
    }
    status = sp_sched_submit(srv->sched, q);
    if (status) {
        rc = send_error(srv, c, status, status == 429 ? "the server is busy: all sequences are "
                        "running and the queue is full; retry later" : "the server is shutting down",
                        NULL);
        goto done;
    }
    if (req.stream) {
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, g, stream_free);
        if (!resp) {
            rc = MHD_NO;
            goto done;
        }
        g = NULL; /* owned by the response now */
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        rc = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        sp_metrics_request(srv->metrics, 200);
        goto done;
    }
    snapshot s;
    for (;;) {
        sp_sched_lock(srv->sched);
        sp_sched_wait_locked(srv->sched, q, q->text_len, q->n_toks, WAIT_SLICE_MS);
        bool fin = q->done;
        sp_sched_unlock(srv->sched);
        if (fin)
            break;
        if (peer_gone(c)) {
            rc = MHD_NO; /* gen_free cancels */
            goto done;
        }
    }
    if (!take_snapshot(g, 0, 0, 0, &s)) {
        snapshot_fini(&s);
        rc = MHD_NO;
        goto done;
    }
    if (s.reason && strcmp(s.reason, "error") == 0)
        rc = send_error(srv, c, 500, s.error, NULL);
    else if (s.reason && strcmp(s.reason, "cancelled") == 0)
        rc = send_error(srv, c, 503, "the request was cancelled: the server is shutting down", NULL);
    else
        rc = send_json(srv, c, 200, final_response(g, &s));
    snapshot_fini(&s);
done:
    gen_free(g);
    prepared_fini(&p);
    sp_oai_request_fini(&req);
    return rc;
}

/* ---- small endpoints ----------------------------------------------------------------- */

static enum MHD_Result handle_models(sp_server *srv, struct MHD_Connection *c, const char *url)
{
    bool one = strncmp(url, "/v1/models/", 11) == 0;
    if (one && strcmp(url + 11, srv->model_id) != 0)
        return send_error(srv, c, 404, "no such model", "model");
    cJSON *root = cJSON_CreateObject();
    cJSON *data = root;
    if (!one) {
        cJSON_AddStringToObject(root, "object", "list");
        data = cJSON_AddArrayToObject(root, "data");
    }
    cJSON *m = one ? root : cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", srv->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)srv->created);
    cJSON_AddStringToObject(m, "owned_by", "specula");
    cJSON_AddNumberToObject(m, "max_model_len", (double)srv->n_ctx);
    if (!one)
        cJSON_AddItemToArray(data, m);
    return send_json(srv, c, 200, root);
}

static enum MHD_Result handle_tokenize(sp_server *srv, struct MHD_Connection *c, const char *body,
                                       size_t len)
{
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return send_error(srv, c, 400, "the request body is not a JSON object", NULL);
    }
    sp_oai_request req;
    memset(&req, 0, sizeof req);
    const char *param = NULL;
    sp_error err = {0};
    char msg[1280];
    enum MHD_Result rc;
    prepared p = {0};
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(j, "add_special_tokens");
    if (add && !cJSON_IsBool(add)) {
        rc = send_error(srv, c, 400, "'add_special_tokens': expected a boolean", "add_special_tokens");
        goto done;
    }
    if (cJSON_GetObjectItemCaseSensitive(j, "messages")) {
        if (sp_oai_request_parse(SP_OAI_CHAT, body, len, &req, &param, &err) != SP_OK) {
            rc = send_error(srv, c, 400, err.msg, param);
            goto done;
        }
    } else {
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        if (!cJSON_IsString(pr)) {
            rc = send_error(srv, c, 400, "'prompt' (a string) or 'messages' is required", "prompt");
            goto done;
        }
        req.kind = SP_OAI_COMPLETION;
        req.prompt = strdup(pr->valuestring);
        req.prompt_len = strlen(pr->valuestring);
        if (add && !cJSON_IsTrue(add)) { /* plain encode without specials */
            sp_status st;
            pthread_mutex_lock(&srv->text_mu);
            st = sp_tokenizer_encode(srv->tok, req.prompt, req.prompt_len, false, &p.ids, &p.n_ids, &err);
            pthread_mutex_unlock(&srv->text_mu);
            if (st != SP_OK) {
                rc = send_error(srv, c, 400, err.msg, "prompt");
                goto done;
            }
            goto answer;
        }
    }
    int status = prepare_prompt(srv, &req, &p, msg, sizeof msg);
    if (status && !(status == 400 && p.ids && p.n_ids == 0)) {
        rc = send_error(srv, c, status, msg, NULL);
        goto done;
    }
answer:;
    cJSON *root = cJSON_CreateObject();
    cJSON *ids = cJSON_AddArrayToObject(root, "tokens");
    for (size_t i = 0; i < p.n_ids; i++)
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(p.ids[i]));
    cJSON_AddNumberToObject(root, "count", (double)p.n_ids);
    cJSON_AddNumberToObject(root, "max_model_len", (double)srv->n_ctx);
    rc = send_json(srv, c, 200, root);
done:
    prepared_fini(&p);
    sp_oai_request_fini(&req);
    cJSON_Delete(j);
    return rc;
}

static enum MHD_Result handle_detokenize(sp_server *srv, struct MHD_Connection *c,
                                         const char *body, size_t len)
{
    cJSON *j = cJSON_ParseWithLength(body, len);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    enum MHD_Result rc;
    if (!cJSON_IsObject(j) || !cJSON_IsArray(toks)) {
        cJSON_Delete(j);
        return send_error(srv, c, 400, "'tokens' (an array of token ids) is required", "tokens");
    }
    size_t n = (size_t)cJSON_GetArraySize(toks);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    size_t i = 0;
    const cJSON *v;
    int64_t n_vocab = sp_tokenizer_n_vocab(srv->tok);
    cJSON_ArrayForEach(v, toks) {
        if (!ids || !cJSON_IsNumber(v) || v->valuedouble != (double)(int32_t)v->valuedouble ||
            v->valuedouble < 0 || v->valuedouble >= (double)n_vocab) {
            free(ids);
            cJSON_Delete(j);
            char msg[128];
            snprintf(msg, sizeof msg, "'tokens'[%zu]: expected a token id below %lld", i,
                     (long long)n_vocab);
            return send_error(srv, c, 400, msg, "tokens");
        }
        ids[i++] = (int32_t)v->valuedouble;
    }
    char *text = NULL;
    size_t tl = 0;
    sp_error err = {0};
    pthread_mutex_lock(&srv->text_mu);
    sp_status st = sp_tokenizer_decode(srv->tok, ids, n, false, &text, &tl, &err);
    pthread_mutex_unlock(&srv->text_mu);
    if (st != SP_OK) {
        rc = send_error(srv, c, 400, err.msg, "tokens");
    } else {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "prompt", text);
        rc = send_json(srv, c, 200, root);
    }
    free(text);
    free(ids);
    cJSON_Delete(j);
    return rc;
}

static enum MHD_Result handle_metrics(sp_server *srv, struct MHD_Connection *c)
{
    if (atomic_load(&srv->ready)) {
        int64_t running, waiting;
        sp_sched_counts(srv->sched, &running, &waiting);
        sp_metrics_gauges(srv->metrics, running, waiting);
    }
    size_t len = 0;
    char *text = sp_metrics_render(srv->metrics, &len);
    if (!text)
        return MHD_NO;
    return send_text(srv, c, 200, "text/plain; version=0.0.4", text, len);
}

/* ---- the access handler -------------------------------------------------------------- */

static bool authorized(sp_server *srv, struct MHD_Connection *c)
{
    if (!srv->cfg.api_key)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0)
        return false;
    /* constant time in the key's length */
    const char *k = srv->cfg.api_key, *g = h + 7;
    size_t kl = strlen(k), gl = strlen(g);
    unsigned diff = (unsigned)(kl ^ gl);
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)k[i] ^ (unsigned char)(i < gl ? g[i] : 0);
    return diff == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    sp_server *srv = cls;
    conn_state *st = *con_cls;
    (void)version;
    if (!st) {
        st = calloc(1, sizeof *st);
        if (!st)
            return MHD_NO;
        *con_cls = st;
        bool path_known = false;
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
            if (strcmp(url, routes[i].path) != 0)
                continue;
            path_known = true;
            if (strcmp(method, routes[i].method) == 0)
                st->r = routes[i].r;
        }
        if (!path_known && strncmp(url, "/v1/models/", 11) == 0 && strcmp(method, "GET") == 0)
            st->r = R_MODELS, path_known = true;
        if (!path_known) {
            st->early_status = 404;
            st->early_msg = "unknown path";
        } else if (st->r == R_NONE) {
            st->early_status = 405;
            st->early_msg = "method not allowed on this path";
        } else if (st->r != R_HEALTH && !authorized(srv, c)) {
            st->early_status = 401;
            st->early_msg = "a valid API key is required: Authorization: Bearer KEY";
        } else if (st->r != R_HEALTH && st->r != R_METRICS && !atomic_load(&srv->ready)) {
            st->early_status = 503;
            st->early_msg = "the model is loading";
        } else {
            const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
            if (cl && strtoull(cl, NULL, 10) > srv->cfg.max_body_bytes) {
                st->early_status = 413;
                st->early_msg = "the request body exceeds the server's limit (--max-body)";
            }
        }
        if (st->early_status)
            return send_error(srv, c, st->early_status, st->early_msg, NULL);
        if (st->r == R_CHAT || st->r == R_COMPLETIONS) {
            st->counted = true;
            atomic_fetch_add(&srv->n_active, 1);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!st->too_big) {
            if (st->body.len + *upload_data_size > srv->cfg.max_body_bytes) {
                st->too_big = true;
                sp_strbuf_free(&st->body);
            } else if (!sp_strbuf_add(&st->body, upload_data, *upload_data_size)) {
                return MHD_NO;
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (st->too_big)
        return send_error(srv, c, 413, "the request body exceeds the server's limit (--max-body)",
                          NULL);
    const char *body = st->body.p ? st->body.p : "";
    size_t len = st->body.len;
    switch (st->r) {
    case R_HEALTH: {
        bool ok = atomic_load(&srv->ready);
        const char *t = ok ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}";
        return send_text(srv, c, ok ? 200 : 503, "application/json", strdup(t), strlen(t));
    }
    case R_METRICS: return handle_metrics(srv, c);
    case R_MODELS: return handle_models(srv, c, url);
    case R_CHAT: return handle_generate(srv, c, SP_OAI_CHAT, body, len);
    case R_COMPLETIONS: return handle_generate(srv, c, SP_OAI_COMPLETION, body, len);
    case R_TOKENIZE: return handle_tokenize(srv, c, body, len);
    case R_DETOKENIZE: return handle_detokenize(srv, c, body, len);
    case R_NONE: break;
    }
    return MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    conn_state *st = *con_cls;
    sp_server *srv = cls;
    (void)c, (void)toe;
    if (st) {
        if (st->counted)
            atomic_fetch_sub(&srv->n_active, 1);
        sp_strbuf_free(&st->body);
        free(st);
        *con_cls = NULL;
    }
}

bool sp_http_start(sp_server *srv, sp_error *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", srv->cfg.port);
    int gai = getaddrinfo(srv->cfg.host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        snprintf(err->msg, sizeof err->msg, "--host %s: %s", srv->cfg.host, gai_strerror(gai));
        err->status = SP_ERR_INVALID_ARG;
        return false;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    unsigned limit = (unsigned)(4 * (srv->cfg.n_parallel + srv->cfg.n_queue) + 64);
    srv->mhd = MHD_start_daemon(flags, (uint16_t)srv->cfg.port, NULL, NULL, on_request, srv,
                                MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                MHD_OPTION_CONNECTION_LIMIT, limit,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                                MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!srv->mhd) {
        snprintf(err->msg, sizeof err->msg, "cannot listen on %s:%d (in use, or not an address "
                 "of this machine)", srv->cfg.host, srv->cfg.port);
        err->status = SP_ERR_IO;
        return false;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di ? di->port : srv->cfg.port;
    return true;
}

void sp_http_quiesce(sp_server *srv)
{
    if (srv->mhd) {
        MHD_socket s = MHD_quiesce_daemon(srv->mhd);
        if (s != MHD_INVALID_SOCKET)
            close(s);
    }
}

void sp_http_wait_idle(sp_server *srv, int timeout_ms)
{
    for (int waited = 0; atomic_load(&srv->n_active) > 0 && waited < timeout_ms; waited += 10) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void sp_http_stop(sp_server *srv)
{
    if (srv->mhd)
        MHD_stop_daemon(srv->mhd);
    srv->mhd = NULL;
}
