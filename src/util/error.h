/* error.h: filling sp_error with formatted messages.
 * Every fallible function in the library reports through sp_err(); the message should
 * name the file, the field and the value, e.g.
 *   "config.json: field 'num_attention_heads': expected a positive integer, got -3". */
#ifndef SP_UTIL_ERROR_H
#define SP_UTIL_ERROR_H

#include "specula.h"

/* Sets err (when not NULL) and returns status, so callers can `return sp_err(...)`. */
sp_status sp_err(sp_error *err, sp_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message (used to add a file name on the way up). */
void sp_err_prefix(sp_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void sp_err_clear(sp_error *err);

#endif
