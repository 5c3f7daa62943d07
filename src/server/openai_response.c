/* openai_response.c: OpenAI response objects (see openai_response.h). */
#include "openai_response.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cJSON *sp_oai_error(int status, const char *message, const char *param)
{
    const char *type = "invalid_request_error", *code = NULL;
    switch (status) {
    case 400: code = "bad_request"; break;
    case 401: code = "invalid_api_key"; break;
    case 404: type = "not_found_error"; code = "not_found"; break;
    case 405: code = "method_not_allowed"; break;
    case 413: code = "request_too_large"; break;
    case 429: type = "rate_limit_error"; code = "rate_limit_exceeded"; break;
    case 503: type = "server_error"; code = "service_unavailable"; break;
    default: type = "server_error"; code = "internal_error"; break;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    cJSON_AddStringToObject(e, "code", code);
    return root;
}

cJSON *sp_oai_usage(int64_t n_prompt, int64_t n_completion)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)n_completion);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(n_prompt + n_completion));
    return u;
}

/* The decoded text of one token (special tokens kept), or "" when it has none. */
static char *token_text(const sp_oai_tokens *t, int32_t id)
{
    char *s = NULL;
    size_t len = 0;
    pthread_mutex_lock(t->mu);
    sp_status st = sp_tokenizer_decode(t->tok, &id, 1, false, &s, &len, NULL);
    pthread_mutex_unlock(t->mu);
    if (st != SP_OK || !s) {
        free(s);
        s = calloc(1, 1);
    }
    return s;
}

static cJSON *bytes_of(const char *s)
{
    cJSON *a = cJSON_CreateArray();
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(*p));
    return a;
}

static cJSON *chat_lp_entry(const sp_oai_tokens *t, int32_t id, float lp)
{
    cJSON *o = cJSON_CreateObject();
    char *s = token_text(t, id);
    cJSON_AddStringToObject(o, "token", s ? s : "");
    cJSON_AddNumberToObject(o, "logprob", (double)lp);
    cJSON_AddItemToObject(o, "bytes", bytes_of(s ? s : ""));
    free(s);
    return o;
}

cJSON *sp_oai_chat_logprobs(const sp_oai_tokens *t, const sp_seq_token *toks, size_t n)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(root, "content");
    for (size_t i = 0; i < n; i++) {
        cJSON *e = chat_lp_entry(t, toks[i].id, toks[i].logprob);
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int32_t j = 0; j < toks[i].n_top; j++)
            cJSON_AddItemToArray(top, chat_lp_entry(t, toks[i].top_ids[j], toks[i].top_lps[j]));
        cJSON_AddItemToArray(content, e);
    }
    return root;
}

cJSON *sp_oai_completion_logprobs(const sp_oai_tokens *t, const sp_seq_token *toks, size_t n,
                                  size_t text_offset0)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(root, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(root, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(root, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(root, "text_offset");
    size_t off = text_offset0;
    for (size_t i = 0; i < n; i++) {
        char *s = token_text(t, toks[i].id);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(s ? s : ""));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber((double)toks[i].logprob));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += s ? strlen(s) : 0;
        free(s);
        cJSON *top = cJSON_CreateObject();
        for (int32_t j = 0; j < toks[i].n_top; j++) {
            char *ts = token_text(t, toks[i].top_ids[j]);
            if (!cJSON_GetObjectItemCaseSensitive(top, ts ? ts : ""))
                cJSON_AddNumberToObject(top, ts ? ts : "", (double)toks[i].top_lps[j]);
            free(ts);
        }
        cJSON_AddItemToArray(tops, top);
    }
    return root;
}

cJSON *sp_oai_chat_message(const sp_chat_delta *d, bool with_role, bool is_delta,
                           const char *id, size_t call_index0)
{
    cJSON *m = cJSON_CreateObject();
    if (with_role)
        cJSON_AddStringToObject(m, "role", "assistant");
    if (!is_delta || d->content.len)
        cJSON_AddStringToObject(m, "content", d->content.p ? d->content.p : "");
    if (d->reasoning.len)
        cJSON_AddStringToObject(m, "reasoning_content", d->reasoning.p);
    if (d->n_calls) {
        cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
        for (size_t i = 0; i < d->n_calls; i++) {
            cJSON *c = cJSON_CreateObject();
            char cid[96];
            snprintf(cid, sizeof cid, "call_%s_%zu", id, call_index0 + i);
            if (is_delta)
                cJSON_AddNumberToObject(c, "index", (double)(call_index0 + i));
            cJSON_AddStringToObject(c, "id", cid);
            cJSON_AddStringToObject(c, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "name", d->calls[i].name);
            cJSON_AddStringToObject(fn, "arguments", d->calls[i].arguments);
            cJSON_AddItemToArray(calls, c);
        }
    }
    return m;
}

cJSON *sp_oai_chunk(const char *object, const char *id, int64_t created, const char *model,
                    cJSON *choice)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "object", object);
    cJSON_AddNumberToObject(c, "created", (double)created);
    cJSON_AddStringToObject(c, "model", model);
    cJSON *choices = cJSON_AddArrayToObject(c, "choices");
    if (choice)
        cJSON_AddItemToArray(choices, choice);
    return c;
}
