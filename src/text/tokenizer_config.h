/* tokenizer_config.h: the one reader of tokenizer_config.json, shared by the tokenizer
 * (text/tok: BOS/EOS strings, add_bos_token, add_eos_token) and the chat templates
 * (text/jinja: special tokens as template variables, the templates themselves), so both
 * read it with transformers' rules:
 *
 *   bos_token, eos_token, unk_token,   a string, or an AddedToken dict whose "content" is
 *   sep_token, pad_token, cls_token,   the string ({"__type": "AddedToken", "content":
 *   mask_token                         "<s>", "lstrip": false, ...}); null or absent: none
 *   extra_special_tokens               {"name": token, ...}: each a variable named after its
 *                                      key (a list form names nothing and is ignored)
 *   add_bos_token, add_eos_token       booleans; has_add_bos tells "absent" from false
 *   chat_template                      a string (named "default"), or a list of
 *                                      {"name": ..., "template": ...}; a later entry of
 *                                      the same name replaces an earlier one, as
 *                                      transformers' dict of templates does
 *
 * The reader owns every string it returns; they live until sp_tok_config_fini. */
#ifndef SP_TEXT_TOKENIZER_CONFIG_H
#define SP_TEXT_TOKENIZER_CONFIG_H

#include "specula.h"
#include <stdbool.h>
#include <stddef.h>

enum { SP_TOKCFG_N_SPECIAL = 7 };
/* The named special tokens in the order transformers lists them. */
extern const char *const sp_tok_config_special_names[SP_TOKCFG_N_SPECIAL];

typedef struct sp_tok_config {
    char *special[SP_TOKCFG_N_SPECIAL]; /* per sp_tok_config_special_names, or NULL */
    char **extra_names, **extra_tokens; /* extra_special_tokens, in file order */
    size_t n_extra;
    bool has_add_bos, add_bos, add_eos;
    char **template_names, **template_texts;
    size_t n_templates;
    void *json;                         /* the whole document (cJSON *) */
} sp_tok_config;

/* Parses the text of a tokenizer_config.json; `what` names it in messages. */
sp_status sp_tok_config_parse(const char *text, size_t n, const char *what, sp_tok_config *out,
                              sp_error *err);
/* Reads and parses the file at path. */
sp_status sp_tok_config_load(const char *path, sp_tok_config *out, sp_error *err);
void sp_tok_config_fini(sp_tok_config *c);

/* A special token's string ("bos_token", ...), or NULL. */
const char *sp_tok_config_special(const sp_tok_config *c, const char *name);
/* The chat template with this name, or NULL. */
const char *sp_tok_config_template(const sp_tok_config *c, const char *name);

#endif
