/* fuzz_jinja.c: the Jinja lexer, parser and renderer with random contexts. Input: a
 * template, a NUL, then the context (a JSON object, or anything). The first byte of the
 * template picks the syntax (trim_blocks / lstrip_blocks, as transformers or plain). The
 * render budget is 1 s, so a slow input shows up as a time-limit error, not a hang. */
#include "fuzz.h"
#include "text/jinja/jinja.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *tpl, *ctx;
    size_t nt, nc;
    if (fuzz_split(data, size, &tpl, &nt, &ctx, &nc))
        return 0;
    sp_jinja_syntax syn = {.trim_blocks = nt && (tpl[0] & 1), .lstrip_blocks = nt && (tpl[0] & 2)};
    sp_jinja_template *t;
    sp_error err = {0};
    if (sp_jinja_compile_syntax(tpl, nt, &syn, &t, &err) == SP_OK) {
        sp_jinja_options opt = {.time_limit_ms = 1000, .now = "2024-02-29T23:05:09"};
        sp_jinja_var defs[] = {{"bos_token", SP_JVAR_STR, "<s>", false},
                               {"flag", SP_JVAR_BOOL, NULL, true},
                               {"tools", SP_JVAR_NONE, NULL, false},
                               {"xs", SP_JVAR_JSON, "[1, 2.5, \"a\", null, {\"k\": [true]}]", false}};
        char *out = NULL;
        size_t n;
        if (sp_jinja_render(t, defs, sizeof defs / sizeof *defs, nc ? ctx : NULL, nc, &opt, &out,
                            &n, &err) == SP_OK)
            free(out);
        sp_jinja_free(t);
    }
    free(tpl);
    free(ctx);
    return 0;
}
