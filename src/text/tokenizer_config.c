/* tokenizer_config.c: reading tokenizer_config.json (see tokenizer_config.h). */
#include "text/tokenizer_config.h"
#include "util/error.h"
#include "util/fileio.h"
#include "util/json.h"

#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX_BYTES (64u << 20)

const char *const sp_tok_config_special_names[SP_TOKCFG_N_SPECIAL] = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

void sp_tok_config_fini(sp_tok_config *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < SP_TOKCFG_N_SPECIAL; i++)
        free(c->special[i]);
    for (size_t i = 0; i < c->n_extra; i++) {
        free(c->extra_names[i]);
        free(c->extra_tokens[i]);
    }
    free(c->extra_names);
    free(c->extra_tokens);
    for (size_t i = 0; i < c->n_templates; i++) {
        free(c->template_names[i]);
        free(c->template_texts[i]);
    }
    free(c->template_names);
    free(c->template_texts);
    cJSON_Delete(c->json);
    memset(c, 0, sizeof *c);
}

/* A special token: a string, or an AddedToken dict's "content". */
static const char *token_text(const cJSON *v)
{
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static sp_status nomem(sp_error *err)
{
    return sp_err(err, SP_ERR_NOMEM, "out of memory");
}

/* Appends (name, text) to two parallel arrays allocated large enough by the caller. */
static bool push_pair(char **names, char **texts, size_t *n, const char *name, const char *text)
{
    char *nm = strdup(name), *tx = strdup(text);
    if (!nm || !tx) {
        free(nm);
        free(tx);
        return false;
    }
    names[*n] = nm;
    texts[*n] = tx;
    (*n)++;
    return true;
}

static sp_status read_extra(sp_tok_config *c, const cJSON *extra, sp_error *err)
{
    if (!cJSON_IsObject(extra))
        return SP_OK;
    size_t k = (size_t)cJSON_GetArraySize(extra);
    c->extra_names = calloc(k ? k : 1, sizeof *c->extra_names);
    c->extra_tokens = calloc(k ? k : 1, sizeof *c->extra_tokens);
    if (!c->extra_names || !c->extra_tokens)
        return nomem(err);
    for (const cJSON *e = extra->child; e; e = e->next) {
        const char *t = token_text(e);
        if (t && e->string && !push_pair(c->extra_names, c->extra_tokens, &c->n_extra, e->string, t))
            return nomem(err);
    }
    return SP_OK;
}

static sp_status add_template(sp_tok_config *c, const char *name, const char *text, sp_error *err)
{
    for (size_t i = 0; i < c->n_templates; i++)
        if (!strcmp(c->template_names[i], name)) {
            char *t = strdup(text);
            if (!t)
                return nomem(err);
            free(c->template_texts[i]);
            c->template_texts[i] = t;
            return SP_OK;
        }
    return push_pair(c->template_names, c->template_texts, &c->n_templates, name, text)
               ? SP_OK : nomem(err);
}

static sp_status read_templates(sp_tok_config *c, const cJSON *ct, const char *what, sp_error *err)
{
    size_t k = cJSON_IsArray(ct) ? (size_t)cJSON_GetArraySize(ct) : cJSON_IsString(ct) ? 1 : 0;
    if (!k)
        return SP_OK;
    c->template_names = calloc(k, sizeof *c->template_names);
    c->template_texts = calloc(k, sizeof *c->template_texts);
    if (!c->template_names || !c->template_texts)
        return nomem(err);
    if (cJSON_IsString(ct))
        return add_template(c, "default", ct->valuestring, err);
    sp_status st = SP_OK;
    for (const cJSON *e = ct->child; e && st == SP_OK; e = e->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (!cJSON_IsString(n) || !cJSON_IsString(t))
            return sp_err(err, SP_ERR_FORMAT, "%s: field 'chat_template': list entries need "
                          "'name' and 'template' strings", what);
        st = add_template(c, n->valuestring, t->valuestring, err);
    }
    return st;
}

static sp_status read_all(sp_tok_config *c, const cJSON *cfg, const char *what, sp_error *err)
{
    for (size_t i = 0; i < SP_TOKCFG_N_SPECIAL; i++) {
        const char *t = token_text(cJSON_GetObjectItemCaseSensitive(cfg, sp_tok_config_special_names[i]));
        if (t && !(c->special[i] = strdup(t)))
            return nomem(err);
    }
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    c->has_add_bos = cJSON_IsBool(ab);
    c->add_bos = cJSON_IsTrue(ab);
    c->add_eos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token"));
    sp_status st = read_extra(c, cJSON_GetObjectItemCaseSensitive(cfg, "extra_special_tokens"), err);
    if (st == SP_OK)
        st = read_templates(c, cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), what, err);
    return st;
}

sp_status sp_tok_config_parse(const char *text, size_t n, const char *what, sp_tok_config *out,
                              sp_error *err)
{
    memset(out, 0, sizeof *out);
    cJSON *cfg;
    sp_status st = sp_json_parse(text, n, what, &cfg, err);
    if (st != SP_OK)
        return st;
    out->json = cfg;
    if (!cJSON_IsObject(cfg))
        st = sp_err(err, SP_ERR_FORMAT, "%s: not a JSON object", what);
    else
        st = read_all(out, cfg, what, err);
    if (st != SP_OK)
        sp_tok_config_fini(out);
    return st;
}

sp_status sp_tok_config_load(const char *path, sp_tok_config *out, sp_error *err)
{
    memset(out, 0, sizeof *out);
    char *text;
    size_t n;
    sp_status st = sp_read_file(path, CONFIG_MAX_BYTES, &text, &n, err);
    if (st != SP_OK)
        return st;
    st = sp_tok_config_parse(text, n, path, out, err);
    free(text);
    return st;
}

const char *sp_tok_config_special(const sp_tok_config *c, const char *name)
{
    for (size_t i = 0; i < SP_TOKCFG_N_SPECIAL; i++)
        if (!strcmp(sp_tok_config_special_names[i], name))
            return c->special[i];
    return NULL;
}

const char *sp_tok_config_template(const sp_tok_config *c, const char *name)
{
    for (size_t i = 0; i < c->n_templates; i++)
        if (!strcmp(c->template_names[i], name))
            return c->template_texts[i];
    return NULL;
}
