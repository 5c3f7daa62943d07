/* openai_request.c: OpenAI request bodies to sp_oai_request, with OpenAI's validation
 * rules (types, ranges) and its error wording where it has one. */
#include "openai_request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sp_status fail(sp_error *err, const char **param, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static sp_status fail(sp_error *err, const char **param, const char *field, const char *fmt, ...)
{
    *param = field;
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = SP_ERR_INVALID_ARG;
    }
    return SP_ERR_INVALID_ARG;
}

/* An absent or null field is "not given". */
static const cJSON *field(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool as_int(const cJSON *v, int64_t *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > 9.007199254740992e15)
        return false;
    *out = (int64_t)v->valuedouble;
    return true;
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

#define FAIL(fieldname, ...) do { st = fail(err, param, fieldname, __VA_ARGS__); goto done; } while (0)
#define OOM() do { st = fail(err, param, NULL, "out of memory"); goto done; } while (0)

/* content: a string, null, or a list of parts of which text parts are joined (OpenAI's
 * content-part form); templates expect a string. */
static sp_status normalize_content(cJSON *msg, size_t idx, const char **param, sp_error *err)
{
    sp_status st = SP_OK;
    cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!c || cJSON_IsNull(c) || cJSON_IsString(c))
        return SP_OK;
    if (!cJSON_IsArray(c))
        return fail(err, param, "messages", "messages[%zu].content: expected a string or an array of parts", idx);
    size_t n = 0, cap = 64;
    char *text = malloc(cap);
    if (!text)
        return fail(err, param, NULL, "out of memory");
    const cJSON *part;
    size_t pi = 0;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type))
            FAIL("messages", "messages[%zu].content[%zu]: expected an object with a type", idx, pi);
        if (strcmp(type->valuestring, "text") != 0)
            FAIL("messages", "messages[%zu].content[%zu]: content part type '%s' is not supported "
                 "(text only)", idx, pi, type->valuestring);
        if (!cJSON_IsString(t))
            FAIL("messages", "messages[%zu].content[%zu].text: expected a string", idx, pi);
        size_t l = strlen(t->valuestring);
        if (n + l + 1 > cap) {
            cap = (n + l + 1) * 2;
            char *p = realloc(text, cap);
            if (!p)
                OOM();
            text = p;
        }
        memcpy(text + n, t->valuestring, l);
        n += l;
        pi++;
    }
    text[n] = 0;
    cJSON *s = cJSON_CreateString(text);
    if (!s || !cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", s)) {
        cJSON_Delete(s);
        OOM();
    }
done:
    free(text);
    return st;
}

/* tool_calls[].function.arguments: OpenAI sends a JSON string; templates (Llama 3.1,
 * Hermes' tojson) want the object, as vLLM passes it. Unparseable strings stay strings. */
static void normalize_tool_calls(cJSON *msg)
{
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    cJSON *call;
    if (!cJSON_IsArray(calls))
        return;
    cJSON_ArrayForEach(call, calls) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        cJSON *args = fn ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
        if (!cJSON_IsString(args))
            continue;
        cJSON *parsed = cJSON_Parse(args->valuestring);
        if (cJSON_IsObject(parsed))
            cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed);
        else
            cJSON_Delete(parsed);
    }
}

static sp_status parse_chat(const cJSON *root, sp_oai_request *req, const char **param,
                            sp_error *err)
{
    sp_status st = SP_OK;
    const cJSON *msgs = field(root, "messages");
    cJSON *ctx = NULL;
    if (!msgs)
        return fail(err, param, "messages", "'messages' is a required property");
    if (!cJSON_IsArray(msgs))
        return fail(err, param, "messages", "'messages': expected an array");
    if (cJSON_GetArraySize(msgs) == 0)
        return fail(err, param, "messages", "'messages': expected a non-empty array");
    ctx = cJSON_CreateObject();
    cJSON *copy = cJSON_Duplicate(msgs, 1);
    if (!ctx || !copy || !cJSON_AddItemToObject(ctx, "messages", copy)) {
        cJSON_Delete(copy);
        OOM();
    }
    cJSON *m;
    size_t i = 0;
    cJSON_ArrayForEach(m, copy) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m))
            FAIL("messages", "messages[%zu]: expected an object", i);
        if (!cJSON_IsString(role))
            FAIL("messages", "messages[%zu].role: expected a string", i);
        if ((st = normalize_content(m, i, param, err)) != SP_OK)
            goto done;
        normalize_tool_calls(m);
        i++;
    }
    const cJSON *tools = field(root, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools))
            FAIL("tools", "'tools': expected an array");
        const cJSON *tc = field(root, "tool_choice");
        bool none = cJSON_IsString(tc) && strcmp(tc->valuestring, "none") == 0;
        if (cJSON_GetArraySize(tools) > 0 && !none) {
            cJSON *tcopy = cJSON_Duplicate(tools, 1);
            if (!tcopy || !cJSON_AddItemToObject(ctx, "tools", tcopy)) {
                cJSON_Delete(tcopy);
                OOM();
            }
            req->has_tools = true;
        }
    }
    const cJSON *kw = field(root, "chat_template_kwargs");
    if (kw) {
        if (!cJSON_IsObject(kw))
            FAIL("chat_template_kwargs", "'chat_template_kwargs': expected an object");
        const cJSON *kv;
        cJSON_ArrayForEach(kv, kw) {
            if (!kv->string || strcmp(kv->string, "messages") == 0)
                continue;
            cJSON *dup = cJSON_Duplicate(kv, 1);
            if (!dup)
                OOM();
            cJSON_DeleteItemFromObjectCaseSensitive(ctx, kv->string);
            cJSON_AddItemToObject(ctx, kv->string, dup);
        }
    }
    if (!cJSON_GetObjectItemCaseSensitive(ctx, "add_generation_prompt"))
        cJSON_AddBoolToObject(ctx, "add_generation_prompt", 1);
    req->chat_context = cJSON_PrintUnformatted(ctx);
    if (!req->chat_context)
        OOM();
done:
    cJSON_Delete(ctx);
    return st;
}

static sp_status parse_ids(const cJSON *arr, sp_oai_request *req, const char **param, sp_error *err)
{
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (n == 0)
        return fail(err, param, "prompt", "'prompt': the prompt is empty");
    req->prompt_ids = malloc(n * sizeof *req->prompt_ids);
    if (!req->prompt_ids)
        return fail(err, param, NULL, "out of memory");
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        int64_t id;
        if (!as_int(v, &id) || id < 0 || id > INT32_MAX)
            return fail(err, param, "prompt", "'prompt'[%zu]: expected a token id", req->n_prompt_ids);
        req->prompt_ids[req->n_prompt_ids++] = (int32_t)id;
    }
    return SP_OK;
}

static sp_status parse_completion(const cJSON *root, sp_oai_request *req, const char **param,
                                  sp_error *err)
{
    const cJSON *p = field(root, "prompt");
    if (!p)
        return fail(err, param, "prompt", "'prompt' is a required property");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 &&
        (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        p = p->child; /* a batch of one */
    if (cJSON_IsString(p)) {
        req->prompt_len = strlen(p->valuestring);
        if (!(req->prompt = dup_n(p->valuestring, req->prompt_len)))
            return fail(err, param, NULL, "out of memory");
        return SP_OK;
    }
    if (cJSON_IsArray(p)) {
        if (p->child && (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
            return fail(err, param, "prompt", "'prompt': batched prompts are not supported; send "
                        "one request per prompt");
        return parse_ids(p, req, param, err);
    }
    return fail(err, param, "prompt", "'prompt': expected a string, an array of token ids, or an "
                "array of one of those");
}

static sp_status get_number(const cJSON *root, const char *name, double lo, double hi, bool *set,
                            float *dst, const char **param, sp_error *err)
{
    const cJSON *v = field(root, name);
    if (!v)
        return SP_OK;
    if (!cJSON_IsNumber(v))
        return fail(err, param, name, "'%s': expected a number", name);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return fail(err, param, name, "'%s': %g is not in [%g, %g]", name, v->valuedouble, lo, hi);
    *dst = (float)v->valuedouble;
    *set = true;
    return SP_OK;
}

static sp_status get_bool(const cJSON *root, const char *name, bool *dst, const char **param,
                          sp_error *err)
{
    const cJSON *v = field(root, name);
    if (!v)
        return SP_OK;
    if (!cJSON_IsBool(v))
        return fail(err, param, name, "'%s': expected a boolean", name);
    *dst = cJSON_IsTrue(v);
    return SP_OK;
}

sp_status sp_oai_request_parse(sp_oai_kind kind, const char *body, size_t len,
                               sp_oai_request *req, const char **param, sp_error *err)
{
    sp_status st = SP_OK;
    memset(req, 0, sizeof *req);
    req->kind = kind;
    req->max_tokens = -1;
    req->sampling = sp_sampling_default_params();
    *param = NULL;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root)
        return fail(err, param, NULL, "the request body is not valid JSON");
    if (!cJSON_IsObject(root))
        FAIL(NULL, "the request body must be a JSON object");

    const cJSON *v = field(root, "model");
    if (v) {
        if (!cJSON_IsString(v))
            FAIL("model", "'model': expected a string");
        if (!(req->model = dup_n(v->valuestring, strlen(v->valuestring))))
            OOM();
    }
    st = kind == SP_OAI_CHAT ? parse_chat(root, req, param, err) : parse_completion(root, req, param, err);
    if (st != SP_OK)
        goto done;

    /* max_completion_tokens supersedes max_tokens (chat) */
    const char *mt_name = "max_tokens";
    v = field(root, "max_tokens");
    if (kind == SP_OAI_CHAT && field(root, "max_completion_tokens")) {
        v = field(root, "max_completion_tokens");
        mt_name = "max_completion_tokens";
    }
    if (v) {
        int64_t n;
        if (!as_int(v, &n))
            FAIL(mt_name, "'%s': expected an integer", mt_name);
        if (n < 1)
            FAIL(mt_name, "'%s': %lld is less than the minimum of 1", mt_name, (long long)n);
        if (n > SP_OAI_MAX_TOKENS_LIMIT)
            FAIL(mt_name, "'%s': %lld is greater than the maximum of %d", mt_name, (long long)n,
                 SP_OAI_MAX_TOKENS_LIMIT);
        req->max_tokens = n;
    }
    if ((st = get_number(root, "temperature", 0, 2, &req->set_temperature,
                         &req->sampling.temperature, param, err)) ||
        (st = get_number(root, "top_p", 0, 1, &req->set_top_p, &req->sampling.top_p, param, err)) ||
        (st = get_number(root, "min_p", 0, 1, &req->set_min_p, &req->sampling.min_p, param, err)))
        goto done;
    if (req->set_top_p && req->sampling.top_p <= 0)
        FAIL("top_p", "'top_p': must be greater than 0");
    if ((v = field(root, "top_k"))) {
        int64_t k;
        if (!as_int(v, &k))
            FAIL("top_k", "'top_k': expected an integer");
        if (k < -1 || k > INT32_MAX)
            FAIL("top_k", "'top_k': %lld is out of range (-1 or 0 = off)", (long long)k);
        req->sampling.top_k = k < 0 ? 0 : (int32_t)k;
        req->set_top_k = true;
    }
    if ((v = field(root, "seed"))) {
        int64_t s;
        if (!as_int(v, &s))
            FAIL("seed", "'seed': expected an integer");
        req->sampling.seed = (uint64_t)s;
        req->set_seed = true;
    }
    if ((v = field(root, "n"))) {
        int64_t n;
        if (!as_int(v, &n))
            FAIL("n", "'n': expected an integer");
        if (n != 1)
            FAIL("n", "'n': only n = 1 is supported");
    }
    if ((v = field(root, "stop"))) {
        if (cJSON_IsString(v)) {
            if (v->valuestring[0] && !(req->stop[req->n_stop++] = dup_n(v->valuestring, strlen(v->valuestring))))
                OOM();
        } else if (cJSON_IsArray(v)) {
            if (cJSON_GetArraySize(v) > SP_OAI_MAX_STOP)
                FAIL("stop", "'stop': at most %d stop sequences", SP_OAI_MAX_STOP);
            const cJSON *s;
            cJSON_ArrayForEach(s, v) {
                if (!cJSON_IsString(s))
                    FAIL("stop", "'stop': expected a string or an array of strings");
                if (s->valuestring[0] &&
                    !(req->stop[req->n_stop++] = dup_n(s->valuestring, strlen(s->valuestring))))
                    OOM();
            }
        } else {
            FAIL("stop", "'stop': expected a string or an array of strings");
        }
    }
    if ((st = get_bool(root, "stream", &req->stream, param, err)) ||
        (st = get_bool(root, "ignore_eos", &req->ignore_eos, param, err)) ||
        (st = get_bool(root, "echo", &req->echo, param, err)))
        goto done;
    if ((v = field(root, "stream_options"))) {
        if (!cJSON_IsObject(v))
            FAIL("stream_options", "'stream_options': expected an object");
        if ((st = get_bool(v, "include_usage", &req->include_usage, param, err)))
            goto done;
    }
    if (kind == SP_OAI_CHAT) {
        if ((st = get_bool(root, "logprobs", &req->logprobs, param, err)))
            goto done;
        if ((v = field(root, "top_logprobs"))) {
            int64_t n;
            if (!as_int(v, &n))
                FAIL("top_logprobs", "'top_logprobs': expected an integer");
            if (n < 0 || n > SP_OAI_MAX_TOP_LOGPROBS)
                FAIL("top_logprobs", "'top_logprobs': %lld is not in [0, %d]", (long long)n,
                     SP_OAI_MAX_TOP_LOGPROBS);
            if (!req->logprobs)
                FAIL("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
            req->top_logprobs = (int32_t)n;
        }
    } else if ((v = field(root, "logprobs"))) {
        /* completions: an integer, the number of alternatives */
        int64_t n;
        if (cJSON_IsBool(v))
            FAIL("logprobs", "'logprobs': expected an integer");
        if (!as_int(v, &n))
            FAIL("logprobs", "'logprobs': expected an integer");
        if (n < 0 || n > SP_OAI_MAX_TOP_LOGPROBS)
            FAIL("logprobs", "'logprobs': %lld is not in [0, %d]", (long long)n, SP_OAI_MAX_TOP_LOGPROBS);
        req->logprobs = true;
        req->top_logprobs = (int32_t)n;
    }
    if (req->echo && kind == SP_OAI_COMPLETION && req->stream)
        FAIL("echo", "'echo' is not supported with 'stream'");
done:
    cJSON_Delete(root);
    return st;
}

void sp_oai_request_fini(sp_oai_request *req)
{
    free(req->model);
    free(req->chat_context);
    free(req->prompt);
    free(req->prompt_ids);
    for (size_t i = 0; i < req->n_stop; i++)
        free(req->stop[i]);
    memset(req, 0, sizeof *req);
}
