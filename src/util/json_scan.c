/* json_scan.c: the pull scanner (see json_scan.h). */
#include "util/json_scan.h"
#include "util/error.h"
#include "util/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256

void sp_jscan_where(const sp_jscan *j, size_t pos, char *out, size_t cap)
{
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos && i < j->n; i++) {
        if (j->s[i] == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)j->s[i] & 0xC0) != 0x80) { /* columns count code points */
            col++;
        }
    }
    snprintf(out, cap, "line %zu, column %zu (byte %zu)", line, col, pos);
}

static bool fail(sp_jscan *j, const char *msg)
{
    if (!j->failed) {
        char where[96];
        sp_jscan_where(j, j->pos, where, sizeof where);
        sp_err(j->err, SP_ERR_FORMAT, "%s: malformed JSON at %s: %s", j->what, where, msg);
    }
    j->failed = true;
    return false;
}

void sp_jscan_init(sp_jscan *j, const char *s, size_t n, const char *what, sp_error *err)
{
    *j = (sp_jscan){s, n, 0, what, err, false};
}

char sp_jscan_peek(sp_jscan *j)
{
    while (j->pos < j->n) {
        char c = j->s[j->pos];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t')
            return c;
        j->pos++;
    }
    return 0;
}

bool sp_jscan_expect(sp_jscan *j, char c)
{
    if (sp_jscan_peek(j) != c) {
        char msg[32] = "expected 'x'";
        msg[10] = c;
        return fail(j, msg);
    }
    j->pos++;
    return true;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool hex4(sp_jscan *j, uint32_t *v)
{
    if (j->pos + 4 > j->n)
        return fail(j, "truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hexval(j->s[j->pos + i]);
        if (d < 0)
            return fail(j, "bad \\u escape");
        *v = *v * 16 + (uint32_t)d;
    }
    j->pos += 4;
    return true;
}

bool sp_jscan_string(sp_jscan *j, char **buf, size_t *cap, size_t *len)
{
    if (!sp_jscan_expect(j, '"'))
        return false;
    size_t o = 0;
    for (;;) {
        if (o + 16 > *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            char *g = realloc(*buf, nc);
            if (!g)
                return fail(j, "out of memory");
            *buf = g;
            *cap = nc;
        }
        if (j->pos >= j->n)
            return fail(j, "unterminated string");
        /* copy a run of plain bytes at once */
        const char *start = j->s + j->pos;
        size_t run = 0, room = *cap - o - 8; /* >= 8: the growth above keeps 16 free */
        while (run < room && j->pos + run < j->n) {
            char c = start[run];
            if (c == '"' || c == '\\' || (unsigned char)c < 0x20)
                break;
            run++;
        }
        memcpy(*buf + o, start, run);
        o += run;
        j->pos += run;
        if (j->pos >= j->n)
            return fail(j, "unterminated string");
        char c = j->s[j->pos];
        if (run == room)
            continue;
        if (c == '"') {
            j->pos++;
            break;
        }
        if ((unsigned char)c < 0x20)
            return fail(j, "control character in string");
        j->pos++; /* backslash */
        if (j->pos >= j->n)
            return fail(j, "unterminated escape");
        char e = j->s[j->pos++];
        switch (e) {
        case '"': (*buf)[o++] = '"'; break;
        case '\\': (*buf)[o++] = '\\'; break;
        case '/': (*buf)[o++] = '/'; break;
        case 'b': (*buf)[o++] = '\b'; break;
        case 'f': (*buf)[o++] = '\f'; break;
        case 'n': (*buf)[o++] = '\n'; break;
        case 'r': (*buf)[o++] = '\r'; break;
        case 't': (*buf)[o++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (!hex4(j, &cp))
                return false;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (j->pos + 2 > j->n || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u')
                    return fail(j, "lone surrogate");
                j->pos += 2;
                if (!hex4(j, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return fail(j, "lone surrogate");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return fail(j, "lone surrogate");
            }
            o += sp_utf8_encode(cp, *buf + o);
            break;
        }
        default: return fail(j, "bad escape");
        }
    }
    (*buf)[o] = '\0';
    *len = o;
    if (!sp_utf8_valid(*buf, o, NULL))
        return fail(j, "string is not valid UTF-8");
    return true;
}

bool sp_jscan_int(sp_jscan *j, int64_t *v)
{
    sp_jscan_peek(j);
    size_t p = j->pos;
    bool neg = p < j->n && j->s[p] == '-';
    if (neg)
        p++;
    if (p >= j->n || j->s[p] < '0' || j->s[p] > '9')
        return fail(j, "expected an integer");
    int64_t x = 0;
    while (p < j->n && j->s[p] >= '0' && j->s[p] <= '9') {
        if (x > (INT64_MAX - 9) / 10)
            return fail(j, "integer too large");
        x = x * 10 + (j->s[p++] - '0');
    }
    if (p < j->n && (j->s[p] == '.' || j->s[p] == 'e' || j->s[p] == 'E'))
        return fail(j, "expected an integer");
    j->pos = p;
    *v = neg ? -x : x;
    return true;
}

static bool skip_depth(sp_jscan *j, int depth)
{
    if (depth > MAX_DEPTH)
        return fail(j, "nested too deeply");
    char c = sp_jscan_peek(j);
    if (c == '"') {
        j->pos++;
        while (j->pos < j->n && j->s[j->pos] != '"') {
            if (j->s[j->pos] == '\\')
                j->pos++;
            j->pos++;
        }
        if (j->pos >= j->n)
            return fail(j, "unterminated string");
        j->pos++;
        return true;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->pos++;
        bool first = true;
        while (sp_jscan_next(j, close, &first)) {
            if (close == '}') {
                if (!skip_depth(j, depth + 1) || !sp_jscan_expect(j, ':'))
                    return false;
            }
            if (!skip_depth(j, depth + 1))
                return false;
        }
        return !j->failed;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        while (j->pos < j->n && strchr("+-0123456789.eE", j->s[j->pos]))
            j->pos++;
        return true;
    }
    for (const char *lit = "true\0false\0null\0"; *lit; lit += strlen(lit) + 1) {
        size_t l = strlen(lit);
        if (j->pos + l <= j->n && memcmp(j->s + j->pos, lit, l) == 0) {
            j->pos += l;
            return true;
        }
    }
    return fail(j, "unexpected character");
}

bool sp_jscan_skip(sp_jscan *j)
{
    return skip_depth(j, 0);
}

bool sp_jscan_next(sp_jscan *j, char close, bool *first)
{
    char c = sp_jscan_peek(j);
    if (c == close) {
        j->pos++;
        return false;
    }
    if (!*first) {
        if (c != ',')
            return fail(j, "expected ',' between elements");
        j->pos++;
        if (sp_jscan_peek(j) == close)
            return fail(j, "trailing comma");
    }
    *first = false;
    if (j->pos >= j->n)
        return fail(j, "unexpected end");
    return true;
}
