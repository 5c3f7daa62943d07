/* json_scan.h: a minimal pull scanner over JSON text, for documents too large to hold as
 * a cJSON tree at acceptable cost (a 27 MB tokenizer.json is ~4 million cJSON nodes).
 * It walks objects and arrays in place, decodes strings into a caller buffer and skips
 * values it is not asked for. Depth is bounded. */
#ifndef SP_UTIL_JSON_SCAN_H
#define SP_UTIL_JSON_SCAN_H

#include "specula.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sp_jscan {
    const char *s;
    size_t n, pos;
    const char *what; /* name for messages */
    sp_error *err;
    bool failed;
} sp_jscan;

void sp_jscan_init(sp_jscan *j, const char *s, size_t n, const char *what, sp_error *err);
/* Writes "line L, column C (byte B)" for byte offset pos (columns count code points). */
void sp_jscan_where(const sp_jscan *j, size_t pos, char *out, size_t cap);
/* Skips whitespace; returns the next byte (or 0 at the end). */
char sp_jscan_peek(sp_jscan *j);
/* Consumes the expected byte after whitespace; false (error set) otherwise. */
bool sp_jscan_expect(sp_jscan *j, char c);
/* Reads a string value into *buf (grown as needed; NUL-terminated); length in *len. */
bool sp_jscan_string(sp_jscan *j, char **buf, size_t *cap, size_t *len);
/* Reads an integer value. */
bool sp_jscan_int(sp_jscan *j, int64_t *v);
/* Skips one value of any kind. */
bool sp_jscan_skip(sp_jscan *j);
/* Iteration: call after '{' or '[' was consumed. Returns true when another element
 * follows (consuming the ',' between elements), false at the closing bracket (consumed)
 * or on error (check j->failed). */
bool sp_jscan_next(sp_jscan *j, char close, bool *first);

#endif
