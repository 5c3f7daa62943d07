/* unicode.c: character classes and lossy UTF-8 (see unicode.h). Categories come from
 * utf8proc. */
#include "text/tok/unicode.h"
#include "util/utf8.h"

#include <string.h>
#include <utf8proc.h>

bool sp_uc_is_whitespace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

bool sp_uc_is_numeric(uint32_t c)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

static bool is_alphabetic(uint32_t c)
{
    /* Alphabetic = L + Nl + Other_Alphabetic (mostly Mn/Mc marks on letters). utf8proc has
     * no Other_Alphabetic; letters, letter numbers and spacing/nonspacing marks of
     * scripts approximate it. */
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO || k == UTF8PROC_CATEGORY_NL;
}

bool sp_uc_is_alphanumeric(uint32_t c)
{
    return is_alphabetic(c) || sp_uc_is_numeric(c);
}

bool sp_uc_is_punctuation(uint32_t c)
{
    if (c < 0x80)
        return (c >= 0x21 && c <= 0x2f) || (c >= 0x3a && c <= 0x40) || (c >= 0x5b && c <= 0x60) ||
               (c >= 0x7b && c <= 0x7e);
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_PC || k == UTF8PROC_CATEGORY_PD || k == UTF8PROC_CATEGORY_PS ||
           k == UTF8PROC_CATEGORY_PE || k == UTF8PROC_CATEGORY_PI || k == UTF8PROC_CATEGORY_PF ||
           k == UTF8PROC_CATEGORY_PO;
}

bool sp_uc_is_mark_nonspacing(uint32_t c)
{
    return utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_MN;
}

bool sp_uc_is_control(uint32_t c)
{
    if (c == '\t' || c == '\n' || c == '\r')
        return false;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CN ||
           k == UTF8PROC_CATEGORY_CO;
}

bool sp_uc_is_cjk(uint32_t c)
{
    return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) ||
           (c >= 0x20000 && c <= 0x2a6df) || (c >= 0x2a700 && c <= 0x2b73f) ||
           (c >= 0x2b740 && c <= 0x2b81f) || (c >= 0x2b820 && c <= 0x2ceaf) ||
           (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

/* Length of the longest prefix of s that could start a valid sequence (the "maximal
 * subpart" of an invalid sequence, per Unicode's recommended U+FFFD substitution). */
static size_t maximal_subpart(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        need = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        if (c == 0xe0)
            lo = 0xa0;
        if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        if (c == 0xf0)
            lo = 0x90;
        if (c == 0xf4)
            hi = 0x8f;
    } else
        return 1;
    size_t i = 1;
    if (i < n && s[i] >= lo && s[i] <= hi) {
        i++;
        while (i < need && i < n && (s[i] & 0xc0) == 0x80)
            i++;
    }
    return i;
}

size_t sp_utf8_lossy(const unsigned char *s, size_t n, char *out)
{
    size_t o = 0, i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            out[o++] = (char)s[i++];
            continue;
        }
        size_t l = sp_utf8_seq_len(s + i, n - i);
        if (l) {
            memcpy(out + o, s + i, l);
            o += l;
            i += l;
            continue;
        }
        i += maximal_subpart(s + i, n - i);
        memcpy(out + o, "\xef\xbf\xbd", 3);
        o += 3;
    }
    out[o] = '\0';
    return o;
}
