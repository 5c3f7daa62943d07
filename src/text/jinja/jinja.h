/* jinja.h: chat-template rendering with a Jinja engine written for specula.
 *
 * sp_jinja_compile parses a template once; sp_jinja_render renders it with variables
 * from a JSON object (kept exact: integers stay integers, 1.0 stays a float, strings may
 * hold U+0000) on top of defaults. Output is byte-for-byte what Python Jinja2 renders in
 * transformers' chat-template environment. Every render is bounded (steps, time, output
 * size, recursion, memory): a hostile template gets an error, never a hang or a crash.
 * A compiled template is read-only and may be rendered from several threads. */
#ifndef SP_TEXT_JINJA_H
#define SP_TEXT_JINJA_H

#include "specula.h"

typedef struct sp_jinja_template sp_jinja_template;

typedef sp_render_options sp_jinja_options; /* public name: specula.h */

typedef enum sp_jinja_var_type { SP_JVAR_STR, SP_JVAR_BOOL, SP_JVAR_NONE, SP_JVAR_JSON } sp_jinja_var_type;

/* A default variable: a string, a boolean, None, or a JSON value (text). */
typedef struct sp_jinja_var {
    const char *name;
    sp_jinja_var_type type;
    const char *str;  /* STR: the string; JSON: its JSON text */
    bool b;
} sp_jinja_var;

/* Whitespace control at compile time. transformers sets both (sp_jinja_compile);
 * plain Jinja2 leaves both off. */
typedef struct sp_jinja_syntax {
    bool trim_blocks;   /* drop the first newline after a block or comment tag */
    bool lstrip_blocks; /* drop spaces/tabs before a block or comment tag on its line */
} sp_jinja_syntax;

/* Template syntax errors and unknown filters/tests are SP_ERR_TEMPLATE. Compiles with
 * transformers' syntax (trim_blocks and lstrip_blocks). */
sp_status sp_jinja_compile(const char *src, size_t n, sp_jinja_template **out, sp_error *err);
sp_status sp_jinja_compile_syntax(const char *src, size_t n, const sp_jinja_syntax *syn,
                                  sp_jinja_template **out, sp_error *err);
void sp_jinja_free(sp_jinja_template *t);

/* ctx_json: a JSON object whose keys become variables, overriding `defaults`. Errors
 * raised by the template (raise_exception, type errors, undefined access) are
 * SP_ERR_TEMPLATE; exceeded budgets SP_ERR_LIMIT; a malformed context SP_ERR_FORMAT.
 * *out is malloc'd. */
sp_status sp_jinja_render(const sp_jinja_template *t, const sp_jinja_var *defaults,
                          size_t n_defaults, const char *ctx_json, size_t ctx_len,
                          const sp_jinja_options *opt, char **out, size_t *out_len,
                          sp_error *err);

#endif
