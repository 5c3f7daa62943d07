/* chat.c: loading chat templates and rendering conversations (see chat.h). */
#include "text/jinja/chat.h"
#include "text/tokenizer_config.h"
#include "util/error.h"
#include "util/fileio.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX_BYTES (64u << 20)
#define MAX_NAMED 32

struct sp_chat {
    char *names[MAX_NAMED];
    char *texts[MAX_NAMED];
    sp_jinja_template *compiled[MAX_NAMED];
    size_t n;
    sp_jinja_var vars[64];
    size_t n_vars;
    bool plain_syntax, no_defaults;
};

void sp_chat_set_plain(sp_chat *c, bool plain_syntax, bool no_defaults)
{
    c->plain_syntax = plain_syntax;
    c->no_defaults = no_defaults;
}

void sp_chat_close(sp_chat *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->names[i]);
        free(c->texts[i]);
        sp_jinja_free(c->compiled[i]);
    }
    for (size_t i = 0; i < c->n_vars; i++) {
        free((char *)c->vars[i].name);
        free((char *)c->vars[i].str);
    }
    free(c);
}

static sp_status add_template(sp_chat *c, const char *name, const char *text, sp_error *err)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->names[i], name)) {
            char *t = strdup(text);
            if (!t)
                return sp_err(err, SP_ERR_NOMEM, "out of memory");
            free(c->texts[i]);
            c->texts[i] = t;
            return SP_OK;
        }
    if (c->n == MAX_NAMED)
        return sp_err(err, SP_ERR_LIMIT, "more than %d named chat templates", MAX_NAMED);
    c->names[c->n] = strdup(name);
    c->texts[c->n] = strdup(text);
    if (!c->names[c->n] || !c->texts[c->n])
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    c->n++;
    return SP_OK;
}

static sp_status add_var(sp_chat *c, const char *name, const char *value, sp_error *err)
{
    for (size_t i = 0; i < c->n_vars; i++)
        if (!strcmp(c->vars[i].name, name))
            return SP_OK;
    if (c->n_vars == sizeof c->vars / sizeof c->vars[0])
        return SP_OK;
    sp_jinja_var *v = &c->vars[c->n_vars];
    v->name = strdup(name);
    v->str = strdup(value);
    v->type = SP_JVAR_STR;
    if (!v->name || !v->str)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    c->n_vars++;
    return SP_OK;
}

/* Special tokens become variables, then the templates (tokenizer_config.h reads them).
 * Takes cfg (finis it). */
static sp_status apply_config(sp_chat *c, sp_tok_config *cfg, sp_error *err)
{
    sp_status st = SP_OK;
    for (size_t i = 0; i < SP_TOKCFG_N_SPECIAL && st == SP_OK; i++)
        if (cfg->special[i])
            st = add_var(c, sp_tok_config_special_names[i], cfg->special[i], err);
    for (size_t i = 0; i < cfg->n_extra && st == SP_OK; i++)
        st = add_var(c, cfg->extra_names[i], cfg->extra_tokens[i], err);
    for (size_t i = 0; i < cfg->n_templates && st == SP_OK; i++)
        st = add_template(c, cfg->template_names[i], cfg->template_texts[i], err);
    sp_tok_config_fini(cfg);
    return st;
}

static sp_status load_config(sp_chat *c, const char *path, sp_error *err)
{
    sp_tok_config cfg;
    sp_status st = sp_tok_config_load(path, &cfg, err);
    return st == SP_OK ? apply_config(c, &cfg, err) : st;
}

static sp_status load_jinja_file(sp_chat *c, const char *path, sp_error *err)
{
    char *text;
    sp_status st = sp_read_file(path, CONFIG_MAX_BYTES, &text, NULL, err);
    if (st != SP_OK)
        return st;
    st = add_template(c, "default", text, err);
    free(text);
    return st;
}

sp_status sp_chat_open(const char *path, sp_chat **out, sp_error *err)
{
    *out = NULL;
    sp_chat *c = calloc(1, sizeof *c);
    if (!c)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    sp_status st = SP_OK;
    size_t n = strlen(path);
    if (sp_dir_exists(path)) {
        char *cfg = sp_path_join(path, "tokenizer_config.json");
        char *jin = sp_path_join(path, "chat_template.jinja");
        if (!cfg || !jin)
            st = sp_err(err, SP_ERR_NOMEM, "out of memory");
        if (st == SP_OK && sp_file_exists(cfg))
            st = load_config(c, cfg, err);
        /* a chat_template.jinja file takes priority over the config's template */
        if (st == SP_OK && sp_file_exists(jin))
            st = load_jinja_file(c, jin, err);
        free(cfg);
        free(jin);
    } else if (n > 6 && !strcmp(path + n - 6, ".jinja")) {
        st = load_jinja_file(c, path, err);
    } else {
        st = load_config(c, path, err);
        /* chat_template.jinja beside a tokenizer_config.json */
        const char *slash = strrchr(path, '/');
        char *dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
        char *jin = dir ? sp_path_join(dir, "chat_template.jinja") : NULL;
        if (st == SP_OK && jin && sp_file_exists(jin))
            st = load_jinja_file(c, jin, err);
        free(dir);
        free(jin);
    }
    if (st == SP_OK && !c->n)
        st = sp_err(err, SP_ERR_FORMAT, "%s: no chat template (no chat_template.jinja and no "
                    "'chat_template' in tokenizer_config.json)", path);
    if (st != SP_OK) {
        sp_chat_close(c);
        return st;
    }
    *out = c;
    return SP_OK;
}

sp_status sp_chat_from_text(const char *template_text, const char *config_json, size_t config_len,
                            sp_chat **out, sp_error *err)
{
    *out = NULL;
    sp_chat *c = calloc(1, sizeof *c);
    if (!c)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    sp_status st = SP_OK;
    if (config_json) {
        sp_tok_config cfg;
        st = sp_tok_config_parse(config_json, config_len, "tokenizer_config.json", &cfg, err);
        if (st == SP_OK)
            st = apply_config(c, &cfg, err);
    }
    if (st == SP_OK && template_text)
        st = add_template(c, "default", template_text, err);
    if (st == SP_OK && !c->n)
        st = sp_err(err, SP_ERR_FORMAT, "no chat template");
    if (st != SP_OK) {
        sp_chat_close(c);
        return st;
    }
    *out = c;
    return SP_OK;
}

/* Whether the context passes tools (a key "tools" that is not null). */
static bool has_tools(const char *ctx, size_t n)
{
    cJSON *j = cJSON_ParseWithLength(ctx, n);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tools");
    bool r = t && !cJSON_IsNull(t);
    cJSON_Delete(j);
    return r;
}

sp_status sp_chat_render(sp_chat *c, const char *ctx_json, size_t ctx_len,
                         const sp_jinja_options *opt, char **out, size_t *out_len, sp_error *err)
{
    size_t pick = c->n;
    bool tools = ctx_json && has_tools(ctx_json, ctx_len);
    for (size_t i = 0; i < c->n && pick == c->n; i++)
        if (tools && !strcmp(c->names[i], "tool_use"))
            pick = i;
    for (size_t i = 0; i < c->n && pick == c->n; i++)
        if (!strcmp(c->names[i], "default"))
            pick = i;
    if (pick == c->n) {
        if (c->n != 1)
            return sp_err(err, SP_ERR_TEMPLATE, "this model has several chat templates and none is "
                          "named 'default'");
        pick = 0;
    }
    if (!c->compiled[pick]) {
        sp_jinja_syntax syn = {.trim_blocks = !c->plain_syntax, .lstrip_blocks = !c->plain_syntax};
        sp_status st = sp_jinja_compile_syntax(c->texts[pick], strlen(c->texts[pick]), &syn,
                                               &c->compiled[pick], err);
        if (st != SP_OK)
            return st;
    }
    sp_jinja_var defaults[70];
    size_t n = 0;
    if (c->no_defaults)
        return sp_jinja_render(c->compiled[pick], NULL, 0, ctx_json, ctx_len, opt, out, out_len, err);
    defaults[n++] = (sp_jinja_var){"add_generation_prompt", SP_JVAR_BOOL, NULL, false};
    defaults[n++] = (sp_jinja_var){"tools", SP_JVAR_NONE, NULL, false};
    defaults[n++] = (sp_jinja_var){"documents", SP_JVAR_NONE, NULL, false};
    for (size_t i = 0; i < c->n_vars; i++)
        defaults[n++] = c->vars[i];
    return sp_jinja_render(c->compiled[pick], defaults, n, ctx_json, ctx_len, opt, out, out_len, err);
}
