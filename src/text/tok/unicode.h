/* unicode.h: the character classes tokenizers depend on, with Rust's definitions
 * (char::is_whitespace, is_numeric, is_alphanumeric; HF's punctuation test), plus
 * Rust's String::from_utf8_lossy replacement rule for decoders. */
#ifndef SP_TEXT_UNICODE_H
#define SP_TEXT_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

bool sp_uc_is_whitespace(uint32_t c);  /* Unicode White_Space */
bool sp_uc_is_numeric(uint32_t c);     /* general category Nd, Nl, No */
bool sp_uc_is_alphanumeric(uint32_t c);/* Alphabetic or numeric */
bool sp_uc_is_punctuation(uint32_t c); /* ASCII punctuation or category P* */
bool sp_uc_is_mark_nonspacing(uint32_t c); /* Mn */
bool sp_uc_is_control(uint32_t c);     /* Cc, Cf, Cn, Co (BERT's _is_control, minus \t\n\r) */
bool sp_uc_is_cjk(uint32_t c);         /* BERT's CJK ideograph ranges */

/* Appends the lossy UTF-8 decoding of bytes to out (capacity >= 3 * n + 1): each
 * maximal invalid subsequence becomes U+FFFD, as Rust's from_utf8_lossy. Returns length. */
size_t sp_utf8_lossy(const unsigned char *bytes, size_t n, char *out);

#endif
