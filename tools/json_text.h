/* json_text.h: JSON string literals with full fidelity. cJSON stores strings NUL-
 * terminated, which loses text containing U+0000; tokenizer inputs and outputs may
 * contain it, so the CLI reads and writes string arrays with these helpers. They belong
 * to the CLI (the library never needs them) and use only specula.h and the C library. */
#ifndef SP_TOOLS_JSON_TEXT_H
#define SP_TOOLS_JSON_TEXT_H

#include "specula.h"
#include <stdio.h>

typedef struct cli_json_strs {
    char **s;     /* each malloc'd, NUL-terminated (may contain NUL bytes) */
    size_t *len;
    size_t n;
} cli_json_strs;

/* Parses a JSON array of strings. `what` names the input in messages. */
sp_status cli_json_parse_string_array(const char *text, size_t n, const char *what,
                                      cli_json_strs *out, sp_error *err);
void cli_json_strs_free(cli_json_strs *s);

/* Writes s[0..n) as a JSON string literal: UTF-8 kept as is, quotes, backslashes and
 * control characters escaped. */
void cli_json_write_string(FILE *f, const char *s, size_t n);

#endif
