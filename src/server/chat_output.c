/* chat_output.c: the reasoning / answer / tool-call splitter (see chat_output.h).
 *
 * A small state machine over a buffer of text not yet decided:
 *   TEXT     answer text; looks for <think>, <tool_call> (and, for Llama 3.1, a leading {
 *            or <|python_tag|>)
 *   THINK    reasoning until </think>
 *   TOOL     a Hermes tool call until </tool_call>
 *   JSON     a Llama 3.1 answer that may be a tool call: kept until the end
 *   H_HEAD   a harmony header: <|start|>assistant<|channel|>NAME [to=functions.X]... until
 *            <|message|>
 *   H_BODY   a harmony message until <|end|>, <|return|> or <|call|>
 * Each state emits what cannot be the start of the marker it waits for. */
#include "chat_output.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

bool sp_strbuf_add(sp_strbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 64;
        while (c < b->len + n + 1)
            c *= 2;
        char *p = realloc(b->p, c);
        if (!p)
            return false;
        b->p = p;
        b->cap = c;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

void sp_strbuf_free(sp_strbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

void sp_chat_delta_clear(sp_chat_delta *d)
{
    d->content.len = 0;
    d->reasoning.len = 0;
    if (d->content.p)
        d->content.p[0] = 0;
    if (d->reasoning.p)
        d->reasoning.p[0] = 0;
    for (size_t i = 0; i < d->n_calls; i++) {
        free(d->calls[i].name);
        free(d->calls[i].arguments);
    }
    d->n_calls = 0;
}

void sp_chat_delta_free(sp_chat_delta *d)
{
    sp_chat_delta_clear(d);
    sp_strbuf_free(&d->content);
    sp_strbuf_free(&d->reasoning);
    free(d->calls);
    memset(d, 0, sizeof *d);
}

static bool has_token(const sp_tokenizer *tok, const char *s)
{
    return tok && sp_tokenizer_token_id(tok, s) >= 0;
}

sp_chat_format sp_chat_format_detect(const sp_tokenizer *tok, const char *prompt, size_t prompt_len,
                                     bool has_tools)
{
    sp_chat_format f = {0};
    if (has_token(tok, "<|channel|>") && has_token(tok, "<|message|>")) {
        f.harmony = true;
        return f;
    }
    if (has_token(tok, "<think>") && has_token(tok, "</think>")) {
        f.think = true;
        f.start_in_think = sp_chat_prompt_opens_think(prompt, prompt_len);
    }
    if (has_tools) {
        if (has_token(tok, "<tool_call>"))
            f.tools = SP_TOOLS_HERMES;
        else if (has_token(tok, "<|python_tag|>") || has_token(tok, "<|eom_id|>"))
            f.tools = SP_TOOLS_LLAMA3;
    }
    return f;
}

bool sp_chat_prompt_opens_think(const char *prompt, size_t prompt_len)
{
    size_t n = prompt_len;
    while (n > 0 && (prompt[n - 1] == '\n' || prompt[n - 1] == ' '))
        n--;
    return n >= 7 && memcmp(prompt + n - 7, "<think>", 7) == 0;
}

bool sp_chat_format_keeps_special(const sp_chat_format *f)
{
    return f->harmony || f->think || f->tools != SP_TOOLS_NONE;
}

typedef enum { S_TEXT, S_THINK, S_TOOL, S_JSON, S_H_HEAD, S_H_BODY } state;
typedef enum { CH_FINAL, CH_ANALYSIS, CH_TOOL } channel;

struct sp_chat_parser {
    sp_chat_format f;
    state st;
    channel ch;
    char *recipient; /* harmony tool name */
    sp_strbuf buf;   /* undecided text */
    sp_strbuf body;  /* a tool call's text */
    bool any_content; /* answer text emitted (non-space) */
    bool after_think; /* strip the newlines after </think> */
};

sp_chat_parser *sp_chat_parser_new(const sp_chat_format *f)
{
    sp_chat_parser *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->f = *f;
    p->st = f->harmony ? S_H_HEAD : f->start_in_think ? S_THINK : S_TEXT;
    return p;
}

void sp_chat_parser_free(sp_chat_parser *p)
{
    if (!p)
        return;
    sp_strbuf_free(&p->buf);
    sp_strbuf_free(&p->body);
    free(p->recipient);
    free(p);
}

/* Position of needle in hay[0..n), or -1. */
static long find(const char *hay, size_t n, const char *needle)
{
    size_t l = strlen(needle);
    for (size_t i = 0; i + l <= n; i++)
        if (memcmp(hay + i, needle, l) == 0)
            return (long)i;
    return -1;
}

/* Bytes at the end of hay[0..n) that are a proper prefix of needle. */
static size_t partial(const char *hay, size_t n, const char *needle)
{
    size_t l = strlen(needle);
    for (size_t k = l - 1; k > 0; k--)
        if (k <= n && memcmp(hay + n - k, needle, k) == 0)
            return k;
    return 0;
}

static void consume(sp_strbuf *b, size_t n)
{
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = 0;
}

static bool emit_content(sp_chat_parser *p, sp_chat_delta *d, const char *s, size_t n)
{
    if (p->after_think) {
        while (n > 0 && (*s == '\n' || *s == ' ')) {
            s++;
            n--;
        }
        if (n == 0)
            return true;
        p->after_think = false;
    }
    for (size_t i = 0; i < n && !p->any_content; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t')
            p->any_content = true;
    return sp_strbuf_add(&d->content, s, n);
}

static bool add_call(sp_chat_delta *d, const char *name, size_t name_len, const char *args,
                     size_t args_len)
{
    if (d->n_calls == d->calls_cap) {
        size_t c = d->calls_cap ? d->calls_cap * 2 : 4;
        sp_tool_call *n = realloc(d->calls, c * sizeof *n);
        if (!n)
            return false;
        d->calls = n;
        d->calls_cap = c;
    }
    sp_tool_call *c = &d->calls[d->n_calls];
    c->name = malloc(name_len + 1);
    c->arguments = malloc(args_len + 1);
    if (!c->name || !c->arguments) {
        free(c->name);
        free(c->arguments);
        return false;
    }
    memcpy(c->name, name, name_len);
    c->name[name_len] = 0;
    memcpy(c->arguments, args, args_len);
    c->arguments[args_len] = 0;
    d->n_calls++;
    return true;
}

/* {"name": N, "arguments"|"parameters": {...}} -> a call. Returns 1 on success, 0 when the
 * text is not a call, -1 when out of memory. */
static int json_call(const char *text, size_t n, sp_chat_delta *d)
{
    cJSON *j = cJSON_ParseWithLength(text, n);
    int rc = 0;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (!args)
        args = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    if (cJSON_IsObject(j) && cJSON_IsString(name)) {
        char *a = args ? (cJSON_IsString(args) ? NULL : cJSON_PrintUnformatted(args)) : NULL;
        const char *as = cJSON_IsString(args) ? args->valuestring : a ? a : "{}";
        rc = add_call(d, name->valuestring, strlen(name->valuestring), as, strlen(as)) ? 1 : -1;
        free(a);
    }
    cJSON_Delete(j);
    return rc;
}

/* A harmony header: "<|start|>assistant<|channel|>commentary to=functions.get <|constrain|>json" */
static bool parse_harmony_header(sp_chat_parser *p, const char *h, size_t n)
{
    free(p->recipient);
    p->recipient = NULL;
    long to = find(h, n, "to=");
    if (to >= 0) {
        size_t s = (size_t)to + 3, e = s;
        while (e < n && h[e] != ' ' && h[e] != '<' && h[e] != '\n')
            e++;
        const char *name = h + s;
        size_t nl = e - s;
        if (nl > 10 && memcmp(name, "functions.", 10) == 0) {
            name += 10;
            nl -= 10;
        }
        if (!(p->recipient = malloc(nl + 1)))
            return false;
        memcpy(p->recipient, name, nl);
        p->recipient[nl] = 0;
    }
    long c = find(h, n, "<|channel|>");
    const char *chn = c >= 0 ? h + c + 11 : "final";
    size_t cl = c >= 0 ? n - (size_t)c - 11 : 5;
    if (p->recipient)
        p->ch = CH_TOOL;
    else if (cl >= 8 && memcmp(chn, "analysis", 8) == 0)
        p->ch = CH_ANALYSIS;
    else
        p->ch = CH_FINAL; /* final, or commentary without a recipient (a preamble) */
    return true;
}

static const char *const harmony_ends[] = {"<|end|>", "<|return|>", "<|call|>"};

bool sp_chat_parser_feed(sp_chat_parser *p, const char *text, size_t n, bool final,
                         sp_chat_delta *d)
{
    if (!sp_strbuf_add(&p->buf, text, n))
        return false;
    for (;;) {
        char *b = p->buf.p;
        size_t len = p->buf.len;
        if (len == 0)
            break;
        switch (p->st) {
        case S_TEXT: {
            if (p->f.tools == SP_TOOLS_LLAMA3 && !p->any_content) {
                size_t i = 0;
                while (i < len && (b[i] == ' ' || b[i] == '\n'))
                    i++;
                if (i < len && (b[i] == '{' || (len - i >= 14 && memcmp(b + i, "<|python_tag|>", 14) == 0))) {
                    p->st = S_JSON;
                    continue;
                }
                if (i < len && b[i] == '<' && len - i < 14 && !final &&
                    memcmp(b + i, "<|python_tag|>", len - i) == 0)
                    return true; /* wait: maybe <|python_tag|> */
                if (i == len && !final)
                    return true;
            }
            const char *marks[2] = {p->f.think ? "<think>" : NULL,
                                    p->f.tools == SP_TOOLS_HERMES ? "<tool_call>" : NULL};
            long best = -1;
            int which = -1;
            for (int m = 0; m < 2; m++) {
                if (!marks[m])
                    continue;
                long at = find(b, len, marks[m]);
                if (at >= 0 && (best < 0 || at < best)) {
                    best = at;
                    which = m;
                }
            }
            if (best >= 0) {
                if (!emit_content(p, d, b, (size_t)best))
                    return false;
                consume(&p->buf, (size_t)best + strlen(marks[which]));
                p->st = which == 0 ? S_THINK : S_TOOL;
                p->body.len = 0;
                continue;
            }
            size_t hold = 0;
            for (int m = 0; m < 2 && !final; m++)
                if (marks[m]) {
                    size_t h = partial(b, len, marks[m]);
                    hold = h > hold ? h : hold;
                }
            if (!emit_content(p, d, b, len - hold))
                return false;
            consume(&p->buf, len - hold);
            return true;
        }
        case S_THINK: {
            long at = find(b, len, "</think>");
            size_t upto = at >= 0 ? (size_t)at : len - (final ? 0 : partial(b, len, "</think>"));
            if (!sp_strbuf_add(&d->reasoning, b, upto))
                return false;
            consume(&p->buf, at >= 0 ? upto + 8 : upto);
            if (at < 0)
                return true;
            p->st = S_TEXT;
            p->after_think = true;
            continue;
        }
        case S_TOOL: {
            long at = find(b, len, "</tool_call>");
            if (at < 0 && !final)
                return true;
            size_t body = at >= 0 ? (size_t)at : len;
            int rc = json_call(b, body, d);
            if (rc < 0)
                return false;
            if (rc == 0) { /* not a call after all: keep the text as the model wrote it */
                if (!emit_content(p, d, "<tool_call>", 11) || !emit_content(p, d, b, body) ||
                    (at >= 0 && !emit_content(p, d, "</tool_call>", 12)))
                    return false;
            }
            consume(&p->buf, at >= 0 ? body + 12 : body);
            p->st = S_TEXT;
            p->after_think = rc == 1; /* newlines between calls */
            continue;
        }
        case S_JSON: {
            if (!final)
                return true;
            size_t i = 0;
            while (i < len && (b[i] == ' ' || b[i] == '\n'))
                i++;
            if (len - i >= 14 && memcmp(b + i, "<|python_tag|>", 14) == 0)
                i += 14;
            /* one call, or several separated by ';' */
            int rc = json_call(b + i, len - i, d);
            if (rc == 0) {
                size_t start = i, n_before = d->n_calls;
                int depth = 0;
                bool in_str = false;
                rc = 1;
                for (size_t j = i; j <= len && rc == 1; j++) {
                    if (j < len && in_str) {
                        if (b[j] == '\\')
                            j++;
                        else if (b[j] == '"')
                            in_str = false;
                        continue;
                    }
                    if (j < len && b[j] == '"')
                        in_str = true;
                    else if (j < len && b[j] == '{')
                        depth++;
                    else if (j < len && b[j] == '}')
                        depth--;
                    else if (j == len || (b[j] == ';' && depth == 0)) {
                        rc = json_call(b + start, j - start, d);
                        start = j + 1;
                    }
                }
                if (rc != 1) { /* not all calls: the answer is text */
                    while (d->n_calls > n_before) {
                        d->n_calls--;
                        free(d->calls[d->n_calls].name);
                        free(d->calls[d->n_calls].arguments);
                    }
                }
            }
            if (rc < 0)
                return false;
            if (rc == 0 && !emit_content(p, d, b, len))
                return false;
            consume(&p->buf, len);
            p->st = S_TEXT;
            return true;
        }
        case S_H_HEAD: {
            size_t i = 0;
            while (i < len && (b[i] == ' ' || b[i] == '\n'))
                i++;
            if (i < len && b[i] != '<') { /* no header: plain text */
                p->st = S_TEXT;
                p->ch = CH_FINAL;
                continue;
            }
            long at = find(b, len, "<|message|>");
            if (at < 0) {
                if (final) {
                    consume(&p->buf, len); /* a header without a message: nothing to say */
                    return true;
                }
                return true;
            }
            if (!parse_harmony_header(p, b, (size_t)at))
                return false;
            consume(&p->buf, (size_t)at + 11);
            p->st = S_H_BODY;
            p->body.len = 0;
            continue;
        }
        case S_H_BODY: {
            long at = -1;
            size_t end_len = 0;
            for (int e = 0; e < 3; e++) {
                long a = find(b, len, harmony_ends[e]);
                if (a >= 0 && (at < 0 || a < at)) {
                    at = a;
                    end_len = strlen(harmony_ends[e]);
                }
            }
            size_t upto = at >= 0 ? (size_t)at : len;
            if (at < 0 && !final) {
                size_t hold = 0;
                for (int e = 0; e < 3; e++) {
                    size_t h = partial(b, len, harmony_ends[e]);
                    hold = h > hold ? h : hold;
                }
                upto = len - hold;
            }
            bool ok = true;
            if (p->ch == CH_ANALYSIS)
                ok = sp_strbuf_add(&d->reasoning, b, upto);
            else if (p->ch == CH_FINAL)
                ok = emit_content(p, d, b, upto);
            else
                ok = sp_strbuf_add(&p->body, b, upto);
            if (!ok)
                return false;
            consume(&p->buf, at >= 0 ? upto + end_len : upto);
            if (at < 0 && !final)
                return true;
            if (p->ch == CH_TOOL) {
                const char *args = p->body.p ? p->body.p : "{}";
                size_t al = p->body.p ? p->body.len : 2;
                if (!add_call(d, p->recipient, strlen(p->recipient), args, al))
                    return false;
                p->body.len = 0;
            }
            p->st = S_H_HEAD;
            continue;
        }
        }
    }
    /* the end of a harmony tool call whose text had all been buffered */
    if (final && p->st == S_H_BODY && p->ch == CH_TOOL) {
        const char *args = p->body.p ? p->body.p : "{}";
        if (!add_call(d, p->recipient, strlen(p->recipient), args, p->body.p ? p->body.len : 2))
            return false;
        p->body.len = 0;
        p->st = S_H_HEAD;
    }
    return true;
}
