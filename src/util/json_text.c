/* json_text.c: exact JSON string arrays in and out (see json_text.h). */
#include "util/json_text.h"
#include "util/error.h"
#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>

void sp_json_strs_free(sp_json_strs *s)
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
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    size_t o = 0;
    while (k < n && t[k] != '"') {
        unsigned char c = (unsigned char)t[k];
        if (c < 0x20) {
            free(s);
            return sp_err(err, SP_ERR_FORMAT, "%s: control character inside a string at byte %zu",
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
            o += sp_utf8_encode(cp, s + o);
            break;
        }
        default:
            goto bad_escape;
        }
    }
    if (k >= n) {
        free(s);
        return sp_err(err, SP_ERR_FORMAT, "%s: unterminated string", what);
    }
    s[o] = '\0';
    size_t bad;
    if (!sp_utf8_valid(s, o, &bad)) {
        free(s);
        return sp_err(err, SP_ERR_FORMAT, "%s: string is not valid UTF-8", what);
    }
    *out = s;
    *len = o;
    *i = k + 1;
    return SP_OK;
bad_escape:
    free(s);
    return sp_err(err, SP_ERR_FORMAT, "%s: invalid escape (or lone surrogate) near byte %zu",
                  what, k);
}

sp_status sp_json_parse_string_array(const char *t, size_t n, const char *what,
                                     sp_json_strs *out, sp_error *err)
{
    memset(out, 0, sizeof *out);
    size_t i = skip_ws(t, n, 0), cap = 0;
    if (i >= n || t[i] != '[')
        return sp_err(err, SP_ERR_FORMAT, "%s: expected a JSON array of strings", what);
    i = skip_ws(t, n, i + 1);
    if (i < n && t[i] == ']') {
        i = skip_ws(t, n, i + 1);
        return i == n ? SP_OK : sp_err(err, SP_ERR_FORMAT, "%s: trailing data after the array", what);
    }
    for (;;) {
        if (i >= n || t[i] != '"') {
            sp_json_strs_free(out);
            return sp_err(err, SP_ERR_FORMAT, "%s: expected a string at byte %zu", what, i);
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 16;
            char **a = realloc(out->s, cap * sizeof *a);
            size_t *b = a ? realloc(out->len, cap * sizeof *b) : NULL;
            if (a)
                out->s = a;
            if (!a || !b) {
                sp_json_strs_free(out);
                return sp_err(err, SP_ERR_NOMEM, "out of memory");
            }
            out->len = b;
        }
        sp_status st = parse_string(t, n, &i, &out->s[out->n], &out->len[out->n], what, err);
        if (st != SP_OK) {
            sp_json_strs_free(out);
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
        sp_json_strs_free(out);
        return sp_err(err, SP_ERR_FORMAT, "%s: expected ',' or ']' at byte %zu", what, i);
    }
    i = skip_ws(t, n, i + 1);
    if (i != n) {
        sp_json_strs_free(out);
        return sp_err(err, SP_ERR_FORMAT, "%s: trailing data after the array", what);
    }
    return SP_OK;
}

void sp_json_write_string(FILE *f, const char *s, size_t n)
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
