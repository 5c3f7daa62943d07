/* regex.h: regular expressions for tokenizer patterns, through PCRE2 (UTF + UCP, JIT).
 *
 * Hugging Face tokenizers runs Split patterns with Oniguruma and some built-in patterns
 * with Rust's regex crate; both give \s and \w their Unicode meanings (White_Space;
 * Alphabetic + marks + decimal digits + connector punctuation + joiners). PCRE2's UCP
 * classes differ slightly (\s includes U+180E, \w omits marks), so patterns are
 * rewritten to the explicit properties before compiling.
 *
 * Every match runs under a match limit and (for the interpreter) depth and heap limits:
 * a hostile pattern or input gives SP_ERR_LIMIT, never a hang. A compiled regex holds its
 * match data: use it from one thread at a time. */
#ifndef SP_TEXT_REGEX_H
#define SP_TEXT_REGEX_H

#include "specula.h"

typedef struct sp_regex sp_regex;

sp_status sp_regex_compile(const char *pattern, size_t len, sp_regex **out, sp_error *err);
void sp_regex_free(sp_regex *re);

/* Finds the leftmost match starting at or after byte `start` of s[0..n) (valid UTF-8,
 * start on a character boundary). Returns 1 and sets [*ms, *me) when found, 0 when not,
 * -1 on error (err set). */
int sp_regex_find(sp_regex *re, const char *s, size_t n, size_t start, size_t *ms,
                  size_t *me, sp_error *err);

#endif
