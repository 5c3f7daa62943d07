/* json_text.c: exact JSON string arrays in and out (see json_text.h), with the UTF-8
 * check they need. */
#include "json_text.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static sp_status fail(sp_error *err, sp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sp_status fail(sp_error *err, sp_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = st;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* UTF-8 of a code point that is not a surrogate (the parser never passes one). */
static size_t utf8_encode(uint32_t cp, char *out)
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
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Well-formed UTF-8 (RFC 3629): shortest forms only, no surrogates, at most U+10FFFF. */
static bool utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!len || i + len > n)
            return false;
        for (size_t k = 1; k < len; k++)
            if ((p[i + k] & 0xc0) != 0x80)
                return false;
        if ((c == 0xe0 && p[i + 1] < 0xa0) || (c == 0xed && p[i + 1] > 0x9f) ||
            (c == 0xf0 && p[i + 1] < 0x90) || (c == 0xf4 && p[i + 1] > 0x8f))
            return false;
        i += len;
    }
    return true;
}

void cli_json_strs_free(cli_json_strs *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->s[i]);
    free(s->s);
    free(s->len);
    memset(s, 0, sizeof *s);
}

static size_t skip_ws(const char *t, size_t n, size_t i)
{
    while (i < n && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r'))
        i++;
    return i;
}

static int hex4(const char *t, size_t n, size_t i, uint32_t *v)
{
    if (i + 4 > n)
        return -1;
    *v = 0;
    for (size_t k = i; k < i + 4; k++) {
        char c = t[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

/* Parses the string literal starting at t[i] == '"'; returns the index after it. */
static sp_status parse_string(const char *t, size_t n, size_t *i, char **out, size_t *len,
                              const char *what, sp_error *err)
{
    size_t k = *i + 1;
    char *s = malloc(n - *i + 1);
    if (!s)
        return fail(err, SP_ERR_NOMEM, "out of memory");
    size_t o = 0;
    while (k < n && t[k] != '"') {
        unsigned char c = (unsigned char)t[k];
        if (c < 0x20) {
            free(s);
            return fail(err, SP_ERR_FORMAT, "%s: control character inside a string at byte %zu",
                          what, k);
        }
        if (c != '\\') {
            s[o++] = (char)c;
            k++;
            continue;
        }
        if (++k >= n)
            break;
        char e = t[k++];
        switch (e) {
        case '"': s[o++] = '"'; break;
        case '\\': s[o++] = '\\'; break;
        case '/': s[o++] = '/'; break;
        case 'b': s[o++] = '\b'; break;
        case 'f': s[o++] = '\f'; break;
        case 'n': s[o++] = '\n'; break;
        case 'r': s[o++] = '\r'; break;
        case 't': s[o++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (hex4(t, n, k, &cp) < 0)
                goto bad_escape;
            k += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (k + 6 > n || t[k] != '\\' || t[k + 1] != 'u' || hex4(t, n, k + 2, &lo) < 0 ||
                    lo < 0xdc00 || lo > 0xdfff)
                    goto bad_escape;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                k += 6;
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                goto bad_escape;
            }
            o += utf8_encode(cp, s + o);
            break;
        }
        default:
            goto bad_escape;
        }
    }
    if (k >= n) {
        free(s);
        return fail(err, SP_ERR_FORMAT, "%s: unterminated string", what);
    }
    s[o] = '\0';
    if (!utf8_valid(s, o)) {
        free(s);
        return fail(err, SP_ERR_FORMAT, "%s: string is not valid UTF-8", what);
    }
    *out = s;
    *len = o;
    *i = k + 1;
    return SP_OK;
bad_escape:
    free(s);
    return fail(err, SP_ERR_FORMAT, "%s: invalid escape (or lone surrogate) near byte %zu",
                  what, k);
}

sp_status cli_json_parse_string_array(const char *t, size_t n, const char *what,
                                      cli_json_strs *out, sp_error *err)
{
    memset(out, 0, sizeof *out);
    size_t i = skip_ws(t, n, 0), cap = 0;
    if (i >= n || t[i] != '[')
        return fail(err, SP_ERR_FORMAT, "%s: expected a JSON array of strings", what);
    i = skip_ws(t, n, i + 1);
    if (i < n && t[i] == ']') {
        i = skip_ws(t, n, i + 1);
        return i == n ? SP_OK : fail(err, SP_ERR_FORMAT, "%s: trailing data after the array", what);
    }
    for (;;) {
        if (i >= n || t[i] != '"') {
            cli_json_strs_free(out);
            return fail(err, SP_ERR_FORMAT, "%s: expected a string at byte %zu", what, i);
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 16;
            char **a = realloc(out->s, cap * sizeof *a);
            size_t *b = a ? realloc(out->len, cap * sizeof *b) : NULL;
            if (a)
                out->s = a;
            if (!a || !b) {
                cli_json_strs_free(out);
                return fail(err, SP_ERR_NOMEM, "out of memory");
            }
            out->len = b;
        }
        sp_status st = parse_string(t, n, &i, &out->s[out->n], &out->len[out->n], what, err);
        if (st != SP_OK) {
            cli_json_strs_free(out);
            return st;
        }
        out->n++;
        i = skip_ws(t, n, i);
        if (i < n && t[i] == ',') {
            i = skip_ws(t, n, i + 1);
            continue;
        }
        if (i < n && t[i] == ']')
            break;
        cli_json_strs_free(out);
        return fail(err, SP_ERR_FORMAT, "%s: expected ',' or ']' at byte %zu", what, i);
    }
    i = skip_ws(t, n, i + 1);
    if (i != n) {
        cli_json_strs_free(out);
        return fail(err, SP_ERR_FORMAT, "%s: trailing data after the array", what);
    }
    return SP_OK;
}

void cli_json_write_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            if (c < 0x20 || c == 0x7f)
                fprintf(f, "\\u%04x", c);
            else
                fputc(c, f);
        }
    }
    fputc('"', f);
}
