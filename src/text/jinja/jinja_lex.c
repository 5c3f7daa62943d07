/* jinja_lex.c: template text to tokens, with Jinja2's whitespace control as transformers
 * configures it: newlines normalized to \n, one trailing newline dropped, trim_blocks
 * (the newline after a block or comment tag goes), lstrip_blocks (spaces and tabs before
 * a block or comment tag at the start of a line go), and the '-' / '+' modifiers. */
#include "text/jinja/jinja_internal.h"
#include "util/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    jinterp *I;
    const char *s;
    size_t n, pos;
    int line;
    jtokens *out;
    bool line_starting;
    bool lstrip_next; /* a '-' closed the last tag: strip leading whitespace of the text */
    bool trim_blocks, lstrip_blocks;
} lexer;

static void emit(lexer *L, jtoken t)
{
    jtokens *o = L->out;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        jtoken *v = jj_alloc(L->I, cap * sizeof *v);
        if (o->n)
            memcpy(v, o->v, o->n * sizeof *v);
        o->v = v;
        o->cap = cap;
    }
    t.line = L->line;
    o->v[o->n++] = t;
}

static char *dup_arena(jinterp *I, const char *s, size_t n)
{
    char *p = jj_alloc(I, n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static void count_lines(lexer *L, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        L->line += L->s[i] == '\n';
}

_Noreturn static void lex_error(lexer *L, const char *msg)
{
    jj_fail(L->I, SP_ERR_TEMPLATE, "template syntax error at line %d: %s", L->line, msg);
}

/* ---- expression tokens ----------------------------------------------------------------- */

static size_t put_cp(char *o, uint32_t cp)
{
    size_t l = sp_utf8_encode(cp, o);
    return l ? l : sp_utf8_encode(0xfffd, o);
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string literal with Python's escapes (unicode-escape decoding). */
static void lex_string(lexer *L)
{
    char q = L->s[L->pos];
    size_t i = L->pos + 1;
    char *buf = jj_alloc(L->I, L->n - L->pos + 1);
    size_t o = 0;
    while (i < L->n && L->s[i] != q) {
        char c = L->s[i];
        if (c != '\\') {
            if (c == '\n')
                L->line++;
            buf[o++] = c;
            i++;
            continue;
        }
        if (i + 1 >= L->n)
            break;
        char e = L->s[i + 1];
        i += 2;
        switch (e) {
        case 'n': buf[o++] = '\n'; break;
        case 't': buf[o++] = '\t'; break;
        case 'r': buf[o++] = '\r'; break;
        case 'a': buf[o++] = '\a'; break;
        case 'b': buf[o++] = '\b'; break;
        case 'f': buf[o++] = '\f'; break;
        case 'v': buf[o++] = '\v'; break;
        case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
            uint32_t v = (uint32_t)(e - '0');
            for (int k = 0; k < 2 && i < L->n && L->s[i] >= '0' && L->s[i] <= '7'; k++)
                v = v * 8 + (uint32_t)(L->s[i++] - '0');
            o += put_cp(buf + o, v);
            break;
        }
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int k = 0; k < nd; k++) {
                int d = i < L->n ? hexv(L->s[i]) : -1;
                if (d < 0)
                    lex_error(L, "truncated \\x, \\u or \\U escape in a string");
                v = v * 16 + (uint32_t)d;
                i++;
            }
            o += put_cp(buf + o, v);
            break;
        }
        case '\n': L->line++; break; /* line continuation */
        case '\\': case '\'': case '"': buf[o++] = e; break;
        default:
            buf[o++] = '\\';
            buf[o++] = e;
        }
    }
    if (i >= L->n)
        lex_error(L, "unterminated string");
    L->pos = i + 1;
    buf[o] = '\0';
    emit(L, (jtoken){.type = T_STRING, .s = buf, .len = o});
}

static void lex_number(lexer *L)
{
    size_t i = L->pos;
    char buf[128];
    size_t o = 0;
    bool is_float = false;
    /* Jinja2's float pattern has (?<!\.): after a dot (x.0.1) digits are integers only */
    bool int_only = i > 0 && L->s[i - 1] == '.';
    if (L->s[i] == '0' && i + 1 < L->n && strchr("xXoObB", L->s[i + 1])) {
        int base = strchr("xX", L->s[i + 1]) ? 16 : strchr("oO", L->s[i + 1]) ? 8 : 2;
        i += 2;
        int64_t v = 0;
        while (i < L->n && (hexv(L->s[i]) >= 0 || L->s[i] == '_')) {
            if (L->s[i] != '_') {
                int d = hexv(L->s[i]);
                if (d >= base)
                    break;
                if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v))
                    lex_error(L, "integer literal does not fit in 64 bits (specula's integers are int64)");
            }
            i++;
        }
        L->pos = i;
        emit(L, (jtoken){.type = T_INT, .i = v});
        return;
    }
    while (i < L->n && o + 2 < sizeof buf) {
        char c = L->s[i];
        if ((c >= '0' && c <= '9') || c == '_') {
            if (c != '_')
                buf[o++] = c;
            i++;
        } else if (int_only) {
            break;
        } else if (c == '.' && !is_float && i + 1 < L->n && L->s[i + 1] >= '0' && L->s[i + 1] <= '9') {
            is_float = true;
            buf[o++] = c;
            i++;
        } else if ((c == 'e' || c == 'E') && i + 1 < L->n &&
                   ((L->s[i + 1] >= '0' && L->s[i + 1] <= '9') ||
                    ((L->s[i + 1] == '+' || L->s[i + 1] == '-') && i + 2 < L->n &&
                     L->s[i + 2] >= '0' && L->s[i + 2] <= '9'))) {
            is_float = true;
            buf[o++] = c;
            buf[o++] = L->s[i + 1];
            i += 2;
        } else {
            break;
        }
    }
    if (o + 2 >= sizeof buf)
        lex_error(L, "number literal too long");
    buf[o] = '\0';
    L->pos = i;
    if (is_float) {
        emit(L, (jtoken){.type = T_FLOAT, .f = strtod(buf, NULL)});
        return;
    }
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE)
        lex_error(L, "integer literal does not fit in 64 bits (specula's integers are int64)");
    emit(L, (jtoken){.type = T_INT, .i = v});
}

static const char *const OPS[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                  "~",  "<",  ">",  "=",  "(",  ")",  "[", "]", "{", "}", ",",
                                  ".",  ":",  "|",  ";"};

/* Lexes the inside of a {{ }} or {% %} tag up to its end ("}}" or "%}") at bracket depth 0.
 * Returns true when the end tag carried a '-' (strip the text after). */
static bool lex_tag(lexer *L, char end0)
{
    int depth = 0;
    for (;;) {
        while (L->pos < L->n && is_ws(L->s[L->pos])) {
            L->line += L->s[L->pos] == '\n';
            L->pos++;
        }
        if (L->pos >= L->n)
            lex_error(L, end0 == '}' ? "missing '}}'" : "missing '%}'");
        const char *p = L->s + L->pos;
        size_t rest = L->n - L->pos;
        if (depth == 0) {
            if (rest >= 3 && (p[0] == '-' || p[0] == '+') && p[1] == end0 && p[2] == '}') {
                L->pos += 3;
                return p[0] == '-';
            }
            if (rest >= 2 && p[0] == end0 && p[1] == '}') {
                L->pos += 2;
                return false;
            }
        }
        char c = p[0];
        if (c == '\'' || c == '"') {
            lex_string(L);
        } else if (c >= '0' && c <= '9') {
            lex_number(L);
        } else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            size_t e = L->pos;
            while (e < L->n && (L->s[e] == '_' || (L->s[e] >= 'a' && L->s[e] <= 'z') ||
                                (L->s[e] >= 'A' && L->s[e] <= 'Z') || (L->s[e] >= '0' && L->s[e] <= '9')))
                e++;
            emit(L, (jtoken){.type = T_NAME, .s = dup_arena(L->I, p, e - L->pos), .len = e - L->pos});
            L->pos = e;
        } else {
            const char *op = NULL;
            for (size_t k = 0; k < sizeof OPS / sizeof OPS[0] && !op; k++)
                if (rest >= strlen(OPS[k]) && !memcmp(p, OPS[k], strlen(OPS[k])))
                    op = OPS[k];
            if (!op) {
                char msg[64];
                snprintf(msg, sizeof msg, "unexpected character '%c'", c);
                lex_error(L, msg);
            }
            if (op[0] == '(' || op[0] == '[' || op[0] == '{')
                depth++;
            else if ((op[0] == ')' || op[0] == ']' || op[0] == '}') && depth > 0)
                depth--;
            emit(L, (jtoken){.type = T_OP, .s = op, .len = strlen(op)});
            L->pos += strlen(op);
        }
    }
}

/* ---- text and tags ------------------------------------------------------------------------ */

static void emit_text(lexer *L, size_t from, size_t to)
{
    if (L->lstrip_next) {
        while (from < to && is_ws(L->s[from]))
            from++;
        L->lstrip_next = false;
    }
    if (to > from)
        emit(L, (jtoken){.type = T_TEXT, .s = dup_arena(L->I, L->s + from, to - from), .len = to - from});
}

/* After a block or comment end: a '-' strips all following whitespace; otherwise
 * trim_blocks drops one newline. Sets line_starting as Jinja2 does. */
static void after_block_end(lexer *L, bool minus)
{
    if (minus) {
        size_t s = L->pos;
        while (L->pos < L->n && is_ws(L->s[L->pos]))
            L->pos++;
        L->line_starting = L->pos > s && L->s[L->pos - 1] == '\n';
        count_lines(L, s, L->pos);
    } else if (L->trim_blocks && L->pos < L->n && L->s[L->pos] == '\n') {
        L->pos++;
        L->line++;
        L->line_starting = true;
    } else {
        L->line_starting = false;
    }
}

/* Strips the text before a tag as its modifier and lstrip_blocks say; returns the end. */
static size_t strip_before(lexer *L, size_t from, size_t to, char mod, bool block_like)
{
    if (mod == '-') {
        while (to > from && is_ws(L->s[to - 1]))
            to--;
        return to;
    }
    if (mod == '+' || !block_like || !L->lstrip_blocks)
        return to;
    size_t l_pos = to;
    while (l_pos > from && L->s[l_pos - 1] != '\n')
        l_pos--;
    if (l_pos > from || L->line_starting) {
        bool only_ws = true;
        for (size_t i = l_pos; i < to; i++)
            only_ws &= L->s[i] == ' ' || L->s[i] == '\t';
        if (only_ws)
            return l_pos;
    }
    return to;
}

/* {% raw %}...{% endraw %}: returns true and emits the raw text when the block is raw. */
static bool try_raw(lexer *L, size_t inner)
{
    size_t i = inner;
    while (i < L->n && is_ws(L->s[i]))
        i++;
    if (L->n - i < 3 || memcmp(L->s + i, "raw", 3) != 0)
        return false;
    i += 3;
    while (i < L->n && is_ws(L->s[i]))
        i++;
    bool minus = i < L->n && L->s[i] == '-';
    if (minus)
        i++;
    if (L->n - i < 2 || L->s[i] != '%' || L->s[i + 1] != '}')
        return false;
    L->pos = i + 2;
    after_block_end(L, minus);
    /* find {% endraw %} */
    for (size_t k = L->pos; k + 1 < L->n; k++) {
        if (L->s[k] != '{' || L->s[k + 1] != '%')
            continue;
        size_t j = k + 2;
        char mod = j < L->n && (L->s[j] == '-' || L->s[j] == '+') ? L->s[j] : 0;
        if (mod)
            j++;
        while (j < L->n && is_ws(L->s[j]))
            j++;
        if (L->n - j < 6 || memcmp(L->s + j, "endraw", 6) != 0)
            continue;
        j += 6;
        while (j < L->n && is_ws(L->s[j]))
            j++;
        bool em = j < L->n && L->s[j] == '-';
        if (em)
            j++;
        if (L->n - j < 2 || L->s[j] != '%' || L->s[j + 1] != '}')
            continue;
        size_t end = strip_before(L, L->pos, k, mod, true);
        emit_text(L, L->pos, end);
        count_lines(L, L->pos, j + 2);
        L->pos = j + 2;
        after_block_end(L, em);
        return true;
    }
    lex_error(L, "missing {% endraw %}");
}

void jj_lex(jinterp *I, const char *src, size_t n, const sp_jinja_syntax *syn, jtokens *out)
{
    /* normalize newlines, drop one trailing newline */
    char *s = jj_alloc(I, n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n')
                i++;
        } else {
            s[m++] = src[i];
        }
    }
    if (m && s[m - 1] == '\n')
        m--;
    s[m] = '\0';
    lexer L = {I, s, m, 0, 1, out, true, false, syn->trim_blocks, syn->lstrip_blocks};
    while (L.pos < L.n) {
        size_t t = L.pos;
        while (t + 1 < L.n && !(L.s[t] == '{' && (L.s[t + 1] == '{' || L.s[t + 1] == '%' || L.s[t + 1] == '#')))
            t++;
        if (t + 1 >= L.n) {
            emit_text(&L, L.pos, L.n);
            count_lines(&L, L.pos, L.n);
            break;
        }
        char kind = L.s[t + 1];
        char mod = t + 2 < L.n && (L.s[t + 2] == '-' || L.s[t + 2] == '+') ? L.s[t + 2] : 0;
        if (kind == '{' && mod == '+')
            mod = 0; /* {{+ is not a modifier */
        size_t end = strip_before(&L, L.pos, t, mod, kind != '{');
        emit_text(&L, L.pos, end);
        count_lines(&L, L.pos, t);
        size_t inner = t + 2 + (mod ? 1 : 0);
        if (kind == '#') {
            const char *close = NULL;
            for (size_t k = inner; k + 1 < L.n && !close; k++)
                if (L.s[k] == '#' && L.s[k + 1] == '}')
                    close = L.s + k;
            if (!close)
                lex_error(&L, "missing '#}'");
            bool minus = close > L.s + inner && close[-1] == '-';
            count_lines(&L, inner, (size_t)(close - L.s));
            L.pos = (size_t)(close - L.s) + 2;
            after_block_end(&L, minus);
            continue;
        }
        if (kind == '%' && try_raw(&L, inner))
            continue;
        L.pos = inner;
        emit(&L, (jtoken){.type = kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN});
        bool minus = lex_tag(&L, kind == '{' ? '}' : '%');
        emit(&L, (jtoken){.type = kind == '{' ? T_VAR_END : T_BLOCK_END});
        if (kind == '{') {
            L.lstrip_next = minus;
            L.line_starting = false;
        } else {
            after_block_end(&L, minus);
        }
    }
    emit(&L, (jtoken){.type = T_EOF});
}
