/* utf8.c: strict UTF-8 handling (see utf8.h). */
#include "util/utf8.h"

size_t sp_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

size_t sp_utf8_seq_len(const unsigned char *s, size_t n)
{
    uint32_t cp;
    return sp_utf8_decode(s, n, &cp);
}

size_t sp_utf8_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp >= 0xd800 && cp <= 0xdfff)
        return 0;
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    if (cp <= 0x10ffff) {
        o[0] = (unsigned char)(0xf0 | (cp >> 18));
        o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[3] = (unsigned char)(0x80 | (cp & 0x3f));
        return 4;
    }
    return 0;
}

bool sp_utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = sp_utf8_seq_len(p + i, n - i);
        if (!l) {
            if (bad_at)
                *bad_at = i;
            return false;
        }
        i += l;
    }
    return true;
}

size_t sp_utf8_complete_prefix(const char *s, size_t n)
{
    /* Walk back over at most 3 continuation bytes to the last lead byte. */
    const unsigned char *p = (const unsigned char *)s;
    size_t i = n;
    size_t back = 0;
    while (i > 0 && back < 4 && (p[i - 1] & 0xc0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0)
        return back == 0 ? 0 : n; /* only continuation bytes: nothing will complete them */
    unsigned c = p[i - 1];
    size_t need = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
                                 : (c & 0xf8) == 0xf0 ? 4 : 1;
    if (back + 1 < need)
        return i - 1; /* the last sequence is still incomplete */
    return n;
}
