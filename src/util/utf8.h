/* utf8.h: UTF-8 validation, decoding and encoding (strict: no surrogates, no overlongs,
 * nothing above U+10FFFF). */
#ifndef SP_UTIL_UTF8_H
#define SP_UTIL_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence starting at s (at most n bytes), or 0 if invalid. */
size_t sp_utf8_seq_len(const unsigned char *s, size_t n);
/* Decodes one code point; returns the number of bytes used, 0 when invalid. */
size_t sp_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Writes cp as UTF-8 into out (at least 4 bytes); returns the length, 0 if cp invalid. */
size_t sp_utf8_encode(uint32_t cp, char *out);
/* True when all n bytes are valid UTF-8. When invalid and bad_at is not NULL, stores the
 * offset of the first bad byte. */
bool sp_utf8_valid(const char *s, size_t n, size_t *bad_at);
/* Number of bytes of the longest prefix of s that ends on a complete UTF-8 sequence. */
size_t sp_utf8_complete_prefix(const char *s, size_t n);

#endif
