/* jinja_str.c: Python str semantics for templates: case mapping (upper, lower, title,
 * capitalize, swapcase with Unicode special casing), strip, split / rsplit, replace, find,
 * padding, character classes (isdigit, isalpha, ...), str.format, printf-style "%"
 * formatting, and the str methods that call them. Filters (jinja_filters.c) and method
 * calls (jinja_methods.c) share these helpers. */
#include "text/jinja/jinja_internal.h"
#include "util/utf8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

void jj_no_kwargs(jinterp *I, const jargs *A, const char *m)
{
    if (A->nk)
        jj_fail(I, SP_ERR_TEMPLATE, "%s() takes no keyword arguments", m);
}

static jv want_str(jinterp *I, jv v, const char *m)
{
    if (v.k != JK_STR)
        jj_fail(I, SP_ERR_TEMPLATE, "%s: expected a string, got '%s'", m, jj_type_name(v));
    return v;
}

static const char *S(jv v) { return v.u.s->s; }
static size_t L(jv v) { return v.u.s->len; }

static jv sub(jinterp *I, jv s, size_t a, size_t b)
{
    return jj_str(I, S(s) + a, b - a);
}

/* ---- case ------------------------------------------------------------------------------- */

/* Python's full uppercase mappings that expand (the common ones). */
static const char *upper_special(uint32_t c)
{
    switch (c) {
    case 0xdf: return "SS";
    case 0xfb00: return "FF";
    case 0xfb01: return "FI";
    case 0xfb02: return "FL";
    case 0xfb03: return "FFI";
    case 0xfb04: return "FFL";
    case 0xfb05:
    case 0xfb06: return "ST";
    case 0x149: return "\xca\xbcN";
    default: return NULL;
    }
}

static bool is_cased(uint32_t c)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

static void put_upper(jinterp *I, jbuf *b, uint32_t c, bool title)
{
    char tmp[8];
    const char *sp = title ? NULL : upper_special(c);
    if (sp) {
        jj_buf_puts(I, b, sp);
        return;
    }
    uint32_t u = (uint32_t)(title ? utf8proc_totitle((utf8proc_int32_t)c) : utf8proc_toupper((utf8proc_int32_t)c));
    jj_buf_put(I, b, tmp, sp_utf8_encode(u, tmp));
}

static void put_lower(jinterp *I, jbuf *b, uint32_t c)
{
    char tmp[8];
    if (c == 0x130) {
        jj_buf_puts(I, b, "i\xcc\x87");
        return;
    }
    uint32_t u = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
    jj_buf_put(I, b, tmp, sp_utf8_encode(u, tmp));
}

/* mode: 0 lower, 1 upper, 2 capitalize, 3 str.title, 4 swapcase */
jv jj_str_case(jinterp *I, jv s, int mode)
{
    jbuf b = {0};
    bool prev_cased = false;
    size_t idx = 0;
    for (size_t i = 0; i < L(s); idx++) {
        uint32_t c;
        size_t l = sp_utf8_decode((const unsigned char *)S(s) + i, L(s) - i, &c);
        if (!l) {
            c = 0xfffd;
            l = 1;
        }
        switch (mode) {
        case 0: put_lower(I, &b, c); break;
        case 1: put_upper(I, &b, c, false); break;
        case 2:
            if (idx == 0)
                put_upper(I, &b, c, true);
            else
                put_lower(I, &b, c);
            break;
        case 3:
            if (prev_cased)
                put_lower(I, &b, c);
            else
                put_upper(I, &b, c, true);
            prev_cased = is_cased(c);
            break;
        default:
            if (utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_LU)
                put_lower(I, &b, c);
            else if (utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_LL)
                put_upper(I, &b, c, false);
            else
                jj_buf_put(I, &b, S(s) + i, l);
        }
        i += l;
    }
    return jj_str(I, b.p ? b.p : "", b.n);
}

/* ---- strip, split, replace, find --------------------------------------------------------- */

static bool in_chars(uint32_t c, jv chars)
{
    if (chars.k != JK_STR)
        return jj_is_space(c);
    for (size_t i = 0; i < L(chars);) {
        uint32_t d;
        size_t l = sp_utf8_decode((const unsigned char *)S(chars) + i, L(chars) - i, &d);
        if (d == c)
            return true;
        i += l ? l : 1;
    }
    return false;
}

jv jj_str_strip(jinterp *I, jv s, jv chars, bool left, bool right)
{
    if (chars.k != JK_NONE && chars.k != JK_UNDEF && chars.k != JK_STR)
        jj_fail(I, SP_ERR_TEMPLATE, "strip arg must be None or str");
    size_t a = 0, b = L(s);
    const unsigned char *p = (const unsigned char *)S(s);
    while (left && a < b) {
        uint32_t c;
        size_t l = sp_utf8_decode(p + a, b - a, &c);
        if (!l || !in_chars(c, chars))
            break;
        a += l;
    }
    while (right && b > a) {
        size_t k = b - 1;
        while (k > a && (p[k] & 0xc0) == 0x80)
            k--;
        uint32_t c;
        if (!sp_utf8_decode(p + k, b - k, &c) || !in_chars(c, chars))
            break;
        b = k;
    }
    return sub(I, s, a, b);
}

/* Substring searches are naive (quadratic on hostile input such as 'a'*N searched for
 * 'a'*M + 'b'), so each probe is charged to the time budget. */
static bool find_at(jinterp *I, jv s, jv n, size_t i)
{
    jj_work(I, L(n));
    return i + L(n) <= L(s) && !memcmp(S(s) + i, S(n), L(n));
}

jv jj_str_replace(jinterp *I, jv s, jv old, jv new_, int64_t count)
{
    want_str(I, old, "replace");
    want_str(I, new_, "replace");
    jbuf b = {0};
    int64_t done = 0;
    if (L(old) == 0) { /* Python inserts new between every character */
        bool ok;
        jlist *chars = jj_iterate(I, s, &ok);
        for (size_t i = 0; i <= chars->n; i++) {
            if (count < 0 || done < count) {
                jj_buf_put(I, &b, S(new_), L(new_));
                done++;
            }
            if (i < chars->n)
                jj_buf_put(I, &b, S(chars->v[i]), L(chars->v[i]));
        }
        return jj_str(I, b.p ? b.p : "", b.n);
    }
    for (size_t i = 0; i < L(s);) {
        if ((count < 0 || done < count) && find_at(I, s, old, i)) {
            jj_buf_put(I, &b, S(new_), L(new_));
            i += L(old);
            done++;
        } else {
            jj_buf_put(I, &b, S(s) + i, 1);
            i++;
        }
    }
    return jj_str(I, b.p ? b.p : "", b.n);
}

/* Python str.split / rsplit. */
/* Whether the code point at p[i] is whitespace; *len gets its byte length. */
static bool space_at(const unsigned char *p, size_t n, size_t i, size_t *len)
{
    uint32_t c;
    size_t l = sp_utf8_decode(p + i, n - i, &c);
    *len = l ? l : 1;
    return l && jj_is_space(c);
}

/* str.split(None, maxsplit) as CPython does it: runs of whitespace separate; once
 * maxsplit is reached the rest (leading whitespace skipped) is one item. */
static jv split_ws(jinterp *I, jv s, int64_t maxsplit)
{
    jv out = jj_list(I, 0, 0);
    const unsigned char *p = (const unsigned char *)S(s);
    size_t n = L(s), i = 0, l;
    for (int64_t k = maxsplit; maxsplit < 0 || k > 0; k--) {
        while (i < n && space_at(p, n, i, &l))
            i += l;
        if (i == n)
            return out;
        size_t j = i;
        while (i < n && !space_at(p, n, i, &l))
            i += l;
        jj_list_push(I, out.u.l, sub(I, s, j, i));
    }
    while (i < n && space_at(p, n, i, &l))
        i += l;
    if (i < n)
        jj_list_push(I, out.u.l, sub(I, s, i, n));
    return out;
}

/* Start of the code point that ends just before byte `end`. */
static size_t prev_cp(const unsigned char *p, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && (p[i] & 0xC0) == 0x80 && end - i < 4)
        i--;
    return i;
}

/* str.rsplit(None, maxsplit): split_ws from the right. */
static jv split_ws_right(jinterp *I, jv s, int64_t maxsplit)
{
    jv rev = jj_list(I, 0, 0);
    const unsigned char *p = (const unsigned char *)S(s);
    size_t n = L(s), e = n, l; /* e: end of the unscanned prefix */
    bool done = false;
    for (int64_t k = maxsplit; !done && (maxsplit < 0 || k > 0); k--) {
        while (e > 0 && space_at(p, n, prev_cp(p, e), &l))
            e = prev_cp(p, e);
        if (e == 0) {
            done = true;
            break;
        }
        size_t j = e;
        while (e > 0 && !space_at(p, n, prev_cp(p, e), &l))
            e = prev_cp(p, e);
        jj_list_push(I, rev.u.l, sub(I, s, e, j));
    }
    while (!done && e > 0 && space_at(p, n, prev_cp(p, e), &l))
        e = prev_cp(p, e);
    if (!done && e > 0)
        jj_list_push(I, rev.u.l, sub(I, s, 0, e));
    jv out = jj_list(I, rev.u.l->n, 0);
    for (size_t k = rev.u.l->n; k-- > 0;)
        jj_list_push(I, out.u.l, rev.u.l->v[k]);
    return out;
}

static jv split(jinterp *I, jv s, jv sep, int64_t maxsplit, bool from_right)
{
    jv out = jj_list(I, 0, 0);
    if (sep.k == JK_NONE || sep.k == JK_UNDEF)
        return from_right ? split_ws_right(I, s, maxsplit) : split_ws(I, s, maxsplit);
    want_str(I, sep, "split");
    if (!L(sep))
        jj_fail(I, SP_ERR_TEMPLATE, "empty separator");
    /* find all separator positions left to right */
    jv pos = jj_list(I, 0, 0);
    for (size_t i = 0; i + L(sep) <= L(s);) {
        if (find_at(I, s, sep, i)) {
            jj_list_push(I, pos.u.l, jj_int((int64_t)i));
            i += L(sep);
        } else {
            i++;
        }
    }
    size_t np = pos.u.l->n, use = maxsplit < 0 || (size_t)maxsplit > np ? np : (size_t)maxsplit;
    size_t first = from_right ? np - use : 0;
    size_t start = 0;
    if (from_right) {
        /* rsplit: the right-most separators are found from the right, non-overlapping */
        pos = jj_list(I, 0, 0);
        size_t i = L(s);
        size_t found = 0;
        jv rpos = jj_list(I, 0, 0);
        while (i >= L(sep) && (maxsplit < 0 || found < (size_t)maxsplit)) {
            if (find_at(I, s, sep, i - L(sep))) {
                jj_list_push(I, rpos.u.l, jj_int((int64_t)(i - L(sep))));
                i -= L(sep);
                found++;
            } else {
                i--;
            }
        }
        for (size_t k = rpos.u.l->n; k-- > 0;)
            jj_list_push(I, pos.u.l, rpos.u.l->v[k]);
        first = 0;
        np = use = pos.u.l->n;
    }
    for (size_t k = first; k < first + use; k++) {
        size_t p = (size_t)pos.u.l->v[k].u.i;
        jj_list_push(I, out.u.l, sub(I, s, start, p));
        start = p + L(sep);
    }
    jj_list_push(I, out.u.l, sub(I, s, start, L(s)));
    return out;
}

static int64_t find(jinterp *I, jv s, jv n, const jargs *A, bool from_right)
{
    want_str(I, n, "find");
    jv st = jarg(A, 1, NULL, jj_none()), en = jarg(A, 2, NULL, jj_none());
    int64_t len = (int64_t)L(s);
    int64_t a = st.k == JK_INT ? (st.u.i < 0 ? st.u.i + len : st.u.i) : 0;
    int64_t b = en.k == JK_INT ? (en.u.i < 0 ? en.u.i + len : en.u.i) : len;
    a = a < 0 ? 0 : a;
    b = b > len ? len : b;
    /* byte offsets == code point offsets only for ASCII; convert the result */
    int64_t hit = -1;
    for (int64_t i = a; i + (int64_t)L(n) <= b; i++)
        if (find_at(I, s, n, (size_t)i)) {
            hit = i;
            if (!from_right)
                break;
        }
    if (hit < 0)
        return -1;
    return (int64_t)jj_utf8_len(S(s), (size_t)hit);
}

jv jj_str_pad(jinterp *I, jv s, int64_t width, uint32_t fill, int where)
{
    int64_t n = (int64_t)jj_utf8_len(S(s), L(s));
    if (width <= n)
        return s;
    if (width > (int64_t)JINJA_MAX_STRING)
        jj_fail(I, SP_ERR_LIMIT, "padding too wide");
    int64_t pad = width - n, left = where < 0 ? 0 : where > 0 ? pad : pad / 2 + (pad & width & 1);
    char f[8];
    size_t fl = sp_utf8_encode(fill, f);
    jbuf b = {0};
    for (int64_t i = 0; i < left; i++)
        jj_buf_put(I, &b, f, fl);
    jj_buf_put(I, &b, S(s), L(s));
    for (int64_t i = 0; i < pad - left; i++)
        jj_buf_put(I, &b, f, fl);
    return jj_str(I, b.p ? b.p : "", b.n);
}

static bool all_chars(jv s, bool (*pred)(uint32_t))
{
    if (!L(s))
        return false;
    for (size_t i = 0; i < L(s);) {
        uint32_t c;
        size_t l = sp_utf8_decode((const unsigned char *)S(s) + i, L(s) - i, &c);
        if (!l || !pred(c))
            return false;
        i += l;
    }
    return true;
}

static bool is_digit(uint32_t c) { return utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_ND || (c >= 0x2070 && c <= 0x2079) || c == 0xb2 || c == 0xb3 || c == 0xb9; }
static bool is_decimal(uint32_t c) { return utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_ND; }
static bool is_numeric(uint32_t c)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}
static bool is_alpha(uint32_t c)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}
static bool is_alnum(uint32_t c) { return is_alpha(c) || is_numeric(c); }

static bool prefix_match(jinterp *I, jv s, jv p, bool end)
{
    if (p.k == JK_LIST && (p.u.l->flags & JL_TUPLE)) {
        for (size_t i = 0; i < p.u.l->n; i++)
            if (prefix_match(I, s, p.u.l->v[i], end))
                return true;
        return false;
    }
    if (p.k != JK_STR)
        jj_fail(I, SP_ERR_TEMPLATE, "%s first arg must be str or a tuple of str, not %s",
              end ? "endswith" : "startswith", jj_type_name(p));
    if (L(p) > L(s))
        return false;
    return !memcmp(S(s) + (end ? L(s) - L(p) : 0), S(p), L(p));
}

/* ---- str.format ------------------------------------------------------------------------- */

static jv str_format(jinterp *I, jv fmt, const jargs *A)
{
    jbuf b = {0};
    size_t auto_idx = 0;
    const char *p = S(fmt), *e = p + L(fmt);
    while (p < e) {
        if (*p == '{' && p + 1 < e && p[1] == '{') {
            jj_buf_puts(I, &b, "{");
            p += 2;
            continue;
        }
        if (*p == '}' && p + 1 < e && p[1] == '}') {
            jj_buf_puts(I, &b, "}");
            p += 2;
            continue;
        }
        if (*p != '{') {
            jj_buf_put(I, &b, p++, 1);
            continue;
        }
        const char *close = memchr(p, '}', (size_t)(e - p));
        if (!close)
            jj_fail(I, SP_ERR_TEMPLATE, "Single '{' encountered in format string");
        const char *field = p + 1;
        size_t fl = (size_t)(close - field);
        const char *conv = memchr(field, '!', fl), *spec = memchr(field, ':', fl);
        if (spec)
            jj_fail(I, SP_ERR_TEMPLATE, "format specifications in str.format are not supported");
        size_t name_len = conv ? (size_t)(conv - field) : fl;
        jv v;
        if (name_len == 0) {
            v = jarg(A, auto_idx++, NULL, jj_undef(NULL));
            if (auto_idx > A->n)
                jj_fail(I, SP_ERR_TEMPLATE, "Replacement index %zu out of range for positional args tuple",
                      auto_idx - 1);
        } else if (field[0] >= '0' && field[0] <= '9') {
            size_t idx = (size_t)strtoul(field, NULL, 10);
            if (idx >= A->n)
                jj_fail(I, SP_ERR_TEMPLATE, "Replacement index %zu out of range for positional args tuple", idx);
            v = A->a[idx];
        } else {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(name_len < 127 ? name_len : 127), field);
            v = jj_undef(NULL);
            for (size_t k = 0; k < A->nk; k++)
                if (!strcmp(A->kn[k], name))
                    v = A->kv[k];
            if (v.k == JK_UNDEF)
                jj_fail(I, SP_ERR_TEMPLATE, "KeyError: '%s'", name);
        }
        if (conv && conv + 1 < close && conv[1] == 'r')
            jj_write_repr(I, &b, v);
        else
            jj_write_str(I, &b, v);
        p = close + 1;
    }
    return jj_str(I, b.p ? b.p : "", b.n);
}

/* ---- printf-style "%" -------------------------------------------------------------------- */

jv jj_format_percent(jinterp *I, jv fmt, jv args)
{
    jbuf b = {0};
    size_t ai = 0;
    bool tuple = args.k == JK_LIST && (args.u.l->flags & JL_TUPLE);
    bool mapping = args.k == JK_DICT;
    const char *p = S(fmt), *e = p + L(fmt);
    while (p < e) {
        if (*p != '%') {
            jj_buf_put(I, &b, p++, 1);
            continue;
        }
        p++;
        if (p < e && *p == '%') {
            jj_buf_puts(I, &b, "%");
            p++;
            continue;
        }
        jv v;
        if (p < e && *p == '(') {
            const char *close = memchr(p, ')', (size_t)(e - p));
            if (!close || !mapping)
                jj_fail(I, SP_ERR_TEMPLATE, "format requires a mapping");
            jv *x = jj_dict_get_str(args.u.d, p + 1, (size_t)(close - p - 1));
            if (!x)
                jj_fail(I, SP_ERR_TEMPLATE, "KeyError in %% formatting");
            v = *x;
            p = close + 1;
        } else if (tuple) {
            if (ai >= args.u.l->n)
                jj_fail(I, SP_ERR_TEMPLATE, "not enough arguments for format string");
            v = args.u.l->v[ai++];
        } else {
            if (ai++ > 0)
                jj_fail(I, SP_ERR_TEMPLATE, "not enough arguments for format string");
            v = args;
        }
        char spec[32] = "%";
        size_t sl = 1;
        while (p < e && strchr("-+ 0#", *p) && sl < 20)
            spec[sl++] = *p++;
        while (p < e && *p >= '0' && *p <= '9' && sl < 26)
            spec[sl++] = *p++;
        if (p < e && *p == '.') {
            spec[sl++] = *p++;
            while (p < e && *p >= '0' && *p <= '9' && sl < 30)
                spec[sl++] = *p++;
        }
        if (p >= e)
            jj_fail(I, SP_ERR_TEMPLATE, "incomplete format");
        char conv = *p++;
        char tmp[512];
        switch (conv) {
        case 's':
        case 'r': {
            jbuf sv = {0};
            if (conv == 's')
                jj_write_str(I, &sv, v);
            else
                jj_write_repr(I, &sv, v);
            spec[sl++] = 's';
            spec[sl] = '\0';
            if (sl == 2)
                jj_buf_put(I, &b, sv.p ? sv.p : "", sv.n);
            else {
                snprintf(tmp, sizeof tmp, spec, sv.p ? sv.p : "");
                jj_buf_puts(I, &b, tmp);
            }
            break;
        }
        case 'd':
        case 'i':
        case 'x':
        case 'X':
        case 'o':
        case 'c':
            if (!jj_is_num(v))
                jj_fail(I, SP_ERR_TEMPLATE, "%%%c format: a real number is required, not %s", conv,
                      jj_type_name(v));
            if (conv == 'c') {
                char u[8];
                jj_buf_put(I, &b, u, sp_utf8_encode((uint32_t)jj_num(v), u));
                break;
            }
            spec[sl++] = 'l';
            spec[sl++] = 'l';
            spec[sl++] = conv == 'i' ? 'd' : conv;
            spec[sl] = '\0';
            snprintf(tmp, sizeof tmp, spec, (long long)(v.k == JK_FLOAT ? trunc(v.u.f) : jj_num(v)));
            jj_buf_puts(I, &b, tmp);
            break;
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
            if (!jj_is_num(v))
                jj_fail(I, SP_ERR_TEMPLATE, "must be real number, not %s", jj_type_name(v));
            spec[sl++] = conv;
            spec[sl] = '\0';
            snprintf(tmp, sizeof tmp, spec, jj_num(v));
            jj_buf_puts(I, &b, tmp);
            break;
        default:
            jj_fail(I, SP_ERR_TEMPLATE, "unsupported format character '%c'", conv);
        }
    }
    if ((tuple && ai < args.u.l->n) || (!tuple && !mapping && ai == 0))
        jj_fail(I, SP_ERR_TEMPLATE, "not all arguments converted during string formatting");
    return jj_str(I, b.p ? b.p : "", b.n);
}

jv jj_str_method(jinterp *I, jv s, const char *m, const jargs *A)
{
#define IS(x) (!strcmp(m, x))
    if (IS("format"))
        return str_format(I, s, A);
    if (IS("split") || IS("rsplit")) {
        jv sep = jarg(A, 0, "sep", jj_none()), mx = jarg(A, 1, "maxsplit", jj_int(-1));
        return split(I, s, sep, mx.k == JK_INT ? mx.u.i : -1, IS("rsplit"));
    }
    jj_no_kwargs(I, A, m);
    if (IS("strip") || IS("lstrip") || IS("rstrip"))
        return jj_str_strip(I, s, jarg(A, 0, NULL, jj_none()), !IS("rstrip"), !IS("lstrip"));
    if (IS("startswith") || IS("endswith"))
        return jj_bool(prefix_match(I, s, jarg(A, 0, NULL, jj_undef(NULL)), IS("endswith")));
    if (IS("replace")) {
        jv c = jarg(A, 2, NULL, jj_int(-1));
        return jj_str_replace(I, s, jarg(A, 0, NULL, jj_undef(NULL)), jarg(A, 1, NULL, jj_undef(NULL)),
                            c.k == JK_INT ? c.u.i : -1);
    }
    if (IS("upper"))
        return jj_str_case(I, s, 1);
    if (IS("lower") || IS("casefold"))
        return jj_str_case(I, s, 0);
    if (IS("capitalize"))
        return jj_str_case(I, s, 2);
    if (IS("title"))
        return jj_str_case(I, s, 3);
    if (IS("swapcase"))
        return jj_str_case(I, s, 4);
    if (IS("find") || IS("rfind") || IS("index") || IS("rindex")) {
        int64_t r = find(I, s, jarg(A, 0, NULL, jj_undef(NULL)), A, m[0] == 'r');
        if (r < 0 && (IS("index") || IS("rindex")))
            jj_fail(I, SP_ERR_TEMPLATE, "ValueError: substring not found");
        return jj_int(r);
    }
    if (IS("count")) {
        jv n = want_str(I, jarg(A, 0, NULL, jj_undef(NULL)), "count");
        if (!L(n))
            return jj_int((int64_t)jj_utf8_len(S(s), L(s)) + 1);
        int64_t c = 0;
        for (size_t i = 0; i + L(n) <= L(s);)
            if (find_at(I, s, n, i)) {
                c++;
                i += L(n);
            } else {
                i++;
            }
        return jj_int(c);
    }
    if (IS("join")) {
        bool ok;
        jlist *items = jj_iterate(I, jarg(A, 0, NULL, jj_none()), &ok);
        if (!ok)
            jj_fail(I, SP_ERR_TEMPLATE, "can only join an iterable");
        jbuf b = {0};
        for (size_t i = 0; i < items->n; i++) {
            if (items->v[i].k != JK_STR)
                jj_fail(I, SP_ERR_TEMPLATE, "sequence item %zu: expected str instance, %s found", i,
                      jj_type_name(items->v[i]));
            if (i)
                jj_buf_put(I, &b, S(s), L(s));
            jj_buf_put(I, &b, S(items->v[i]), L(items->v[i]));
        }
        return jj_str(I, b.p ? b.p : "", b.n);
    }
    if (IS("isdigit"))
        return jj_bool(all_chars(s, is_digit));
    if (IS("isdecimal"))
        return jj_bool(all_chars(s, is_decimal));
    if (IS("isnumeric"))
        return jj_bool(all_chars(s, is_numeric));
    if (IS("isalpha"))
        return jj_bool(all_chars(s, is_alpha));
    if (IS("isalnum"))
        return jj_bool(all_chars(s, is_alnum));
    if (IS("isspace"))
        return jj_bool(all_chars(s, jj_is_space));
    if (IS("islower") || IS("isupper")) {
        jv lo = jj_str_case(I, s, 0), up = jj_str_case(I, s, 1);
        bool has_cased = !jj_equal(I, lo, up);
        return jj_bool(has_cased && jj_equal(I, s, IS("islower") ? lo : up));
    }
    if (IS("istitle"))
        return jj_bool(L(s) && jj_equal(I, s, jj_str_case(I, s, 3)) && !jj_equal(I, jj_str_case(I, s, 0), jj_str_case(I, s, 1)));
    if (IS("zfill") || IS("ljust") || IS("rjust") || IS("center")) {
        jv w = jarg(A, 0, NULL, jj_undef(NULL));
        if (w.k != JK_INT)
            jj_fail(I, SP_ERR_TEMPLATE, "%s: an integer width is required", m);
        uint32_t fill = ' ';
        jv fv = jarg(A, 1, NULL, jj_none());
        if (fv.k == JK_STR && L(fv))
            sp_utf8_decode((const unsigned char *)S(fv), L(fv), &fill);
        if (IS("zfill")) {
            bool sign = L(s) && (S(s)[0] == '-' || S(s)[0] == '+');
            jv body = jj_str_pad(I, sign ? sub(I, s, 1, L(s)) : s, w.u.i > 0 ? w.u.i - sign : 0, '0', 1);
            if (!sign)
                return body;
            jbuf b = {0};
            jj_buf_put(I, &b, S(s), 1);
            jj_buf_put(I, &b, S(body), L(body));
            return jj_str(I, b.p, b.n);
        }
        return jj_str_pad(I, s, w.u.i, fill, IS("ljust") ? -1 : IS("rjust") ? 1 : 0);
    }
    if (IS("partition") || IS("rpartition")) {
        jv sep = want_str(I, jarg(A, 0, NULL, jj_undef(NULL)), m);
        int64_t hit = -1;
        for (size_t i = 0; i + L(sep) <= L(s); i++)
            if (find_at(I, s, sep, i)) {
                hit = (int64_t)i;
                if (IS("partition"))
                    break;
            }
        jv t = jj_list(I, 3, JL_TUPLE);
        if (hit < 0) {
            jv e = jj_cstr(I, "");
            jj_list_push(I, t.u.l, IS("partition") ? s : e);
            jj_list_push(I, t.u.l, e);
            jj_list_push(I, t.u.l, IS("partition") ? e : s);
        } else {
            jj_list_push(I, t.u.l, sub(I, s, 0, (size_t)hit));
            jj_list_push(I, t.u.l, sep);
            jj_list_push(I, t.u.l, sub(I, s, (size_t)hit + L(sep), L(s)));
        }
        return t;
    }
    if (IS("splitlines")) {
        jv out = jj_list(I, 0, 0);
        size_t start = 0;
        for (size_t i = 0; i < L(s);) {
            uint32_t c;
            size_t l = sp_utf8_decode((const unsigned char *)S(s) + i, L(s) - i, &c);
            if (!l)
                l = 1;
            if (c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
                c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029) {
                if (c == '\r' && i + 1 < L(s) && S(s)[i + 1] == '\n')
                    l = 2;
                jj_list_push(I, out.u.l, sub(I, s, start, i));
                start = i + l;
            }
            i += l;
        }
        if (start < L(s))
            jj_list_push(I, out.u.l, sub(I, s, start, L(s)));
        return out;
    }
    if (IS("removeprefix") || IS("removesuffix")) {
        jv a = want_str(I, jarg(A, 0, NULL, jj_undef(NULL)), m);
        bool end = IS("removesuffix");
        if (prefix_match(I, s, a, end))
            return end ? sub(I, s, 0, L(s) - L(a)) : sub(I, s, L(a), L(s));
        return s;
    }
#undef IS
    jj_fail(I, SP_ERR_TEMPLATE, "'str' object has no attribute '%s'", m);
}

