/* jinja_value.c: the arena, errors, and Jinja values with Python's semantics: truthiness,
 * equality and ordering, str() and repr() (including repr(float)), iteration, len(), and
 * conversion from and to JSON (json.dumps as transformers' tojson calls it). */
#include "text/jinja/jinja_internal.h"
#include "util/error.h"
#include "util/json_scan.h"
#include "util/utf8.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- arena and errors ------------------------------------------------------------------ */

void *jj_alloc(jinterp *I, size_t n)
{
    jarena *a = &I->arena;
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->used + n > a->head->cap) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        if (a->total + cap > a->limit)
            jj_fail(I, SP_ERR_LIMIT, "template used more than %zu MB of memory",
                  (size_t)(a->limit >> 20));
        ja_chunk *c = malloc(sizeof *c + cap);
        if (!c)
            jj_fail(I, SP_ERR_NOMEM, "out of memory while rendering a template");
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->total += cap;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

void jj_free_all(jarena *a)
{
    while (a->head) {
        ja_chunk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
    a->total = 0;
}

_Noreturn void jj_fail(jinterp *I, sp_status st, const char *fmt, ...)
{
    if (I->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(I->err->msg, sizeof I->err->msg, fmt, ap);
        va_end(ap);
        I->err->status = st;
    }
    I->status = st;
    longjmp(I->fail, 1);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void jj_tick(jinterp *I)
{
    if (++I->steps > JINJA_MAX_STEPS)
        jj_fail(I, SP_ERR_LIMIT, "template exceeded %llu evaluation steps",
              (unsigned long long)JINJA_MAX_STEPS);
    if ((I->steps & 4095) == 0 && I->deadline_ms > 0 && now_ms() > I->deadline_ms)
        jj_fail(I, SP_ERR_LIMIT, "template rendering exceeded its time limit");
}

void jj_work(jinterp *I, size_t bytes)
{
    I->work += bytes + 1;
    if (I->work >= (1u << 22)) {
        I->work = 0;
        if (I->deadline_ms > 0 && now_ms() > I->deadline_ms)
            jj_fail(I, SP_ERR_LIMIT, "template rendering exceeded its time limit");
    }
}

_Noreturn void jj_int_overflow(jinterp *I, const char *what)
{
    jj_fail(I, SP_ERR_TEMPLATE,
          "integer overflow in %s: the result does not fit in 64 bits (specula's integers are int64)",
          what);
}

int64_t jj_int_from_double(jinterp *I, double x, const char *what)
{
    /* -2^63 is exact as a double; 2^63 is the first value that does not fit */
    if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0))
        jj_int_overflow(I, what);
    return (int64_t)x;
}

/* ---- constructors ----------------------------------------------------------------------- */

jv jj_str(jinterp *I, const char *s, size_t n)
{
    if (n > JINJA_MAX_STRING)
        jj_fail(I, SP_ERR_LIMIT, "template built a string of %zu bytes", n);
    jstr *p = jj_alloc(I, sizeof *p + n + 1);
    p->len = n;
    if (n)
        memcpy(p->s, s, n);
    p->s[n] = '\0';
    jv v = {.k = JK_STR, .u = {.s = p}};
    return v;
}

jv jj_cstr(jinterp *I, const char *s)
{
    return jj_str(I, s, strlen(s));
}

jv jj_list(jinterp *I, size_t cap, uint8_t flags)
{
    jlist *l = jj_alloc(I, sizeof *l);
    l->n = 0;
    l->cap = cap;
    l->v = cap ? jj_alloc(I, cap * sizeof *l->v) : NULL;
    l->flags = flags;
    jv v = {.k = JK_LIST, .u = {.l = l}};
    return v;
}

void jj_list_push(jinterp *I, jlist *l, jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        jv *nv = jj_alloc(I, cap * sizeof *nv);
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jv jj_dict(jinterp *I, size_t cap)
{
    jdict *d = jj_alloc(I, sizeof *d);
    memset(d, 0, sizeof *d);
    if (cap) {
        d->keys = jj_alloc(I, cap * sizeof *d->keys);
        d->vals = jj_alloc(I, cap * sizeof *d->vals);
        d->cap = cap;
    }
    jv v = {.k = JK_DICT, .u = {.d = d}};
    return v;
}

/* Dicts with DICT_INDEX_MIN or more entries keep a hash index of their string keys
 * (open addressing, slots hold entry index + 1), maintained by jj_dict_set: a JSON context
 * or a namespace with 100k keys would otherwise cost 10^10 comparisons to build. The
 * index covers entries [0, indexed); lookups use it only when it covers the whole dict
 * (a dict built another way, or a view taken before later insertions, scans). */
#define DICT_INDEX_MIN 16

static uint64_t key_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static bool index_usable(const jdict *d)
{
    return d->index && d->indexed == d->n;
}

jv *jj_dict_get_str(const jdict *d, const char *key, size_t len)
{
    if (index_usable(d)) {
        size_t mask = d->index_cap - 1;
        for (size_t h = (size_t)key_hash(key, len) & mask;; h = (h + 1) & mask) {
            uint32_t slot = d->index[h];
            if (!slot)
                return NULL;
            const jv *k = &d->keys[slot - 1];
            if (slot - 1 < d->n && k->u.s->len == len && memcmp(k->u.s->s, key, len) == 0)
                return &d->vals[slot - 1];
        }
    }
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].k == JK_STR && d->keys[i].u.s->len == len &&
            memcmp(d->keys[i].u.s->s, key, len) == 0)
            return &d->vals[i];
    return NULL;
}

jv *jj_dict_get(jinterp *I, const jdict *d, jv key)
{
    if (key.k == JK_STR)
        return jj_dict_get_str(d, key.u.s->s, key.u.s->len);
    for (size_t i = 0; i < d->n; i++)
        if (jj_equal(I, d->keys[i], key))
            return &d->vals[i];
    return NULL;
}

static void index_put(jdict *d, size_t i)
{
    if (d->keys[i].k != JK_STR)
        return;
    size_t mask = d->index_cap - 1;
    size_t h = (size_t)key_hash(d->keys[i].u.s->s, d->keys[i].u.s->len) & mask;
    while (d->index[h])
        h = (h + 1) & mask;
    d->index[h] = (uint32_t)(i + 1);
}

/* Brings the index up to date after an append (rebuilt at twice the size when it passes
 * half full or was never built). */
static void index_update(jinterp *I, jdict *d)
{
    if (d->n < DICT_INDEX_MIN || d->n >= UINT32_MAX)
        return;
    if (!d->index || d->indexed != d->n - 1 || 2 * d->n > d->index_cap) {
        size_t cap = 64;
        while (cap < 4 * d->n)
            cap *= 2;
        d->index = jj_alloc(I, cap * sizeof *d->index);
        memset(d->index, 0, cap * sizeof *d->index);
        d->index_cap = cap;
        for (size_t i = 0; i < d->n; i++)
            index_put(d, i);
    } else {
        index_put(d, d->n - 1);
    }
    d->indexed = d->n;
}

void jj_dict_set(jinterp *I, jdict *d, jv key, jv val)
{
    jv *old = jj_dict_get(I, d, key);
    if (old) {
        *old = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jv *k = jj_alloc(I, cap * sizeof *k), *v = jj_alloc(I, cap * sizeof *v);
        if (d->n) {
            memcpy(k, d->keys, d->n * sizeof *k);
            memcpy(v, d->vals, d->n * sizeof *v);
        }
        d->keys = k;
        d->vals = v;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n++] = val;
    index_update(I, d);
}

/* ---- Python semantics -------------------------------------------------------------------- */

const char *jj_type_name(jv v)
{
    switch ((jk)v.k) {
    case JK_UNDEF: return "Undefined";
    case JK_NONE: return "NoneType";
    case JK_BOOL: return "bool";
    case JK_INT: return "int";
    case JK_FLOAT: return "float";
    case JK_STR: return "str";
    case JK_LIST:
        return v.u.l->flags & JL_TUPLE ? "tuple" : v.u.l->flags & JL_GEN ? "generator" : "list";
    case JK_DICT: return "dict";
    case JK_NS: return "Namespace";
    case JK_FUNC: return "builtin_function_or_method";
    case JK_MACRO: return "Macro";
    case JK_LOOP: return "LoopContext";
    case JK_VIEW: return "dict_view";
    case JK_CYCLER: return "Cycler";
    case JK_JOINER: return "Joiner";
    }
    return "object";
}

bool jj_truthy(jinterp *I, jv v)
{
    (void)I;
    switch ((jk)v.k) {
    case JK_UNDEF:
    case JK_NONE: return false;
    case JK_BOOL: return v.u.b;
    case JK_INT: return v.u.i != 0;
    case JK_FLOAT: return v.u.f != 0.0;
    case JK_STR: return v.u.s->len > 0;
    case JK_LIST: return (v.u.l->flags & JL_GEN) ? true : v.u.l->n > 0;
    case JK_DICT:
    case JK_VIEW: return v.u.d->n > 0;
    default: return true;
    }
}

bool jj_is_num(jv v)
{
    return v.k == JK_BOOL || v.k == JK_INT || v.k == JK_FLOAT;
}

double jj_num(jv v)
{
    return v.k == JK_FLOAT ? v.u.f : v.k == JK_INT ? (double)v.u.i : (double)v.u.b;
}

static int64_t jv_intval(jv v)
{
    return v.k == JK_INT ? v.u.i : (int64_t)v.u.b;
}

/* Containers can share items (`ns.l = [ns.l, ns.l]` doubles the tree each time), so
 * comparing, printing or serializing them can take exponential time: every recursive step
 * ticks the step and time budget, and nesting deeper than JINJA_MAX_VALUE_DEPTH is an
 * error (Python raises RecursionError). */
static void value_step(jinterp *I, int depth)
{
    jj_tick(I);
    if (depth > JINJA_MAX_VALUE_DEPTH)
        jj_fail(I, SP_ERR_LIMIT, "value nested deeper than %d (RecursionError)", JINJA_MAX_VALUE_DEPTH);
}

static bool equal_rec(jinterp *I, jv a, jv b, int depth);

/* Python compares container items with identity first (PyObject_RichCompareBool). */
static bool item_equal(jinterp *I, jv a, jv b, int depth)
{
    if (a.k == b.k && (a.k == JK_LIST || a.k == JK_DICT || a.k == JK_NS) && a.u.l == b.u.l)
        return true;
    return equal_rec(I, a, b, depth + 1);
}

static bool equal_rec(jinterp *I, jv a, jv b, int depth)
{
    if (jj_is_num(a) && jj_is_num(b)) {
        if (a.k != JK_FLOAT && b.k != JK_FLOAT)
            return jv_intval(a) == jv_intval(b);
        return jj_num(a) == jj_num(b);
    }
    if (a.k != b.k)
        return false;
    switch ((jk)a.k) {
    case JK_UNDEF:
    case JK_NONE: return true;
    case JK_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case JK_LIST: {
        jlist *x = a.u.l, *y = b.u.l;
        if ((x->flags | y->flags) & JL_GEN)
            return x == y;
        if ((x->flags & JL_TUPLE) != (y->flags & JL_TUPLE) || x->n != y->n)
            return false;
        value_step(I, depth);
        for (size_t i = 0; i < x->n; i++)
            if (!item_equal(I, x->v[i], y->v[i], depth))
                return false;
        return true;
    }
    case JK_DICT: {
        jdict *x = a.u.d, *y = b.u.d;
        if (x->n != y->n)
            return false;
        value_step(I, depth);
        for (size_t i = 0; i < x->n; i++) {
            jv *o = jj_dict_get(I, y, x->keys[i]);
            if (!o || !item_equal(I, x->vals[i], *o, depth))
                return false;
        }
        return true;
    }
    default: return a.u.d == b.u.d;
    }
}

bool jj_equal(jinterp *I, jv a, jv b)
{
    return equal_rec(I, a, b, 0);
}

static int compare_rec(jinterp *I, jv a, jv b, int depth)
{
    if (a.k == JK_UNDEF || b.k == JK_UNDEF)
        jj_fail(I, SP_ERR_TEMPLATE, "'%s' is undefined",
              (a.k == JK_UNDEF ? a.u.undef : b.u.undef) ? (a.k == JK_UNDEF ? a.u.undef : b.u.undef)
                                                         : "value");
    if (jj_is_num(a) && jj_is_num(b)) {
        if (a.k != JK_FLOAT && b.k != JK_FLOAT) {
            int64_t x = jv_intval(a), y = jv_intval(b);
            return x < y ? -1 : x > y;
        }
        double x = jj_num(a), y = jj_num(b);
        return x < y ? -1 : x > y;
    }
    if (a.k == JK_STR && b.k == JK_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        if (c)
            return c < 0 ? -1 : 1;
        return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
    }
    if (a.k == JK_LIST && b.k == JK_LIST && !((a.u.l->flags | b.u.l->flags) & JL_GEN) &&
        (a.u.l->flags & JL_TUPLE) == (b.u.l->flags & JL_TUPLE)) {
        jlist *x = a.u.l, *y = b.u.l;
        value_step(I, depth);
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (item_equal(I, x->v[i], y->v[i], depth))
                continue;
            return compare_rec(I, x->v[i], y->v[i], depth + 1);
        }
        return x->n < y->n ? -1 : x->n > y->n;
    }
    jj_fail(I, SP_ERR_TEMPLATE, "'<' not supported between instances of '%s' and '%s'",
          jj_type_name(a), jj_type_name(b));
}

int jj_compare(jinterp *I, jv a, jv b)
{
    return compare_rec(I, a, b, 0);
}

/* Jinja2 sorts by a list of keys ([key] < [key']): equal keys never reach '<', so
 * [None, None]|sort works while [None, 1]|sort raises. */
static int sort_key_cmp(jinterp *I, jv a, jv b)
{
    return jj_equal(I, a, b) ? 0 : jj_compare(I, a, b);
}

void jj_sort_by(jinterp *I, jv *items, jv *keys, size_t n, bool reverse)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    jj_sort_by(I, items, keys, h, reverse);
    jj_sort_by(I, items + h, keys + h, n - h, reverse);
    jv *ti = jj_alloc(I, n * sizeof *ti), *tk = jj_alloc(I, n * sizeof *tk);
    size_t a = 0, b = h, o = 0;
    while (a < h && b < n) {
        jj_tick(I);
        int c = sort_key_cmp(I, keys[b], keys[a]);
        bool take_b = reverse ? c > 0 : c < 0;
        if (take_b) {
            ti[o] = items[b];
            tk[o++] = keys[b++];
        } else {
            ti[o] = items[a];
            tk[o++] = keys[a++];
        }
    }
    while (a < h) {
        ti[o] = items[a];
        tk[o++] = keys[a++];
    }
    while (b < n) {
        ti[o] = items[b];
        tk[o++] = keys[b++];
    }
    memcpy(items, ti, n * sizeof *ti);
    memcpy(keys, tk, n * sizeof *tk);
}

/* ---- strings ------------------------------------------------------------------------------ */

size_t jj_utf8_len(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

bool jj_is_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

void jj_buf_put(jinterp *I, jbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        if (cap > JINJA_MAX_OUTPUT + 64)
            jj_fail(I, SP_ERR_LIMIT, "template output exceeded %u MB", JINJA_MAX_OUTPUT >> 20);
        char *p = jj_alloc(I, cap);
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void jj_buf_puts(jinterp *I, jbuf *b, const char *s)
{
    jj_buf_put(I, b, s, strlen(s));
}

static void jj_write_float(jinterp *I, jbuf *b, double f)
{
    if (isnan(f)) {
        jj_buf_puts(I, b, "nan");
        return;
    }
    if (isinf(f)) {
        jj_buf_puts(I, b, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0.0) {
        jj_buf_puts(I, b, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    /* shortest digits that round-trip, as Python's repr */
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f)
            break;
    }
    char digits[24];
    size_t nd = 0;
    const char *q = e;
    bool neg = *q == '-';
    if (neg)
        q++;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            digits[nd++] = *q;
    int exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    int decpt = exp10 + 1;
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -decpt; i++)
                out[o++] = '0';
            memcpy(out + o, digits, nd);
            o += nd;
        } else if ((size_t)decpt >= nd) {
            memcpy(out + o, digits, nd);
            o += nd;
            for (size_t i = nd; i < (size_t)decpt; i++)
                out[o++] = '0';
            out[o++] = '.';
            out[o++] = '0';
        } else {
            memcpy(out + o, digits, (size_t)decpt);
            o += (size_t)decpt;
            out[o++] = '.';
            memcpy(out + o, digits + decpt, nd - (size_t)decpt);
            o += nd - (size_t)decpt;
        }
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+',
                              exp10 < 0 ? -exp10 : exp10);
    }
    jj_buf_put(I, b, out, o);
}

static bool is_printable(uint32_t c)
{
    if (c < 0x20 || c == 0x7f)
        return false;
    if (c < 0x7f)
        return true;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

static void write_str_repr(jinterp *I, jbuf *b, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jj_buf_put(I, b, &q, 1);
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t l = sp_utf8_decode((const unsigned char *)s + i, n - i, &c);
        if (!l) {
            c = (unsigned char)s[i];
            l = 1;
        }
        char tmp[16];
        if (c == (uint32_t)q || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)c;
            jj_buf_put(I, b, tmp, 2);
        } else if (c == '\n') {
            jj_buf_puts(I, b, "\\n");
        } else if (c == '\r') {
            jj_buf_puts(I, b, "\\r");
        } else if (c == '\t') {
            jj_buf_puts(I, b, "\\t");
        } else if (is_printable(c)) {
            jj_buf_put(I, b, s + i, l);
        } else if (c <= 0xff) {
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
            jj_buf_puts(I, b, tmp);
        } else if (c <= 0xffff) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            jj_buf_puts(I, b, tmp);
        } else {
            snprintf(tmp, sizeof tmp, "\\U%08x", c);
            jj_buf_puts(I, b, tmp);
        }
        i += l;
    }
    jj_buf_put(I, b, &q, 1);
}

static void repr_rec(jinterp *I, jbuf *b, jv v, int depth);

static void write_seq(jinterp *I, jbuf *b, const jv *v, size_t n, bool tuple, int depth)
{
    value_step(I, depth);
    jj_buf_puts(I, b, tuple ? "(" : "[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            jj_buf_puts(I, b, ", ");
        repr_rec(I, b, v[i], depth + 1);
    }
    if (tuple && n == 1)
        jj_buf_puts(I, b, ",");
    jj_buf_puts(I, b, tuple ? ")" : "]");
}

static void write_dict(jinterp *I, jbuf *b, const jdict *d, int depth)
{
    value_step(I, depth);
    jj_buf_puts(I, b, "{");
    for (size_t i = 0; i < d->n; i++) {
        if (i)
            jj_buf_puts(I, b, ", ");
        repr_rec(I, b, d->keys[i], depth + 1);
        jj_buf_puts(I, b, ": ");
        repr_rec(I, b, d->vals[i], depth + 1);
    }
    jj_buf_puts(I, b, "}");
}

static void repr_rec(jinterp *I, jbuf *b, jv v, int depth)
{
    char tmp[64];
    switch ((jk)v.k) {
    case JK_UNDEF: jj_buf_puts(I, b, "Undefined"); return;
    case JK_NONE: jj_buf_puts(I, b, "None"); return;
    case JK_BOOL: jj_buf_puts(I, b, v.u.b ? "True" : "False"); return;
    case JK_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        jj_buf_puts(I, b, tmp);
        return;
    case JK_FLOAT: jj_write_float(I, b, v.u.f); return;
    case JK_STR: write_str_repr(I, b, v.u.s->s, v.u.s->len); return;
    case JK_LIST:
        if (v.u.l->flags & JL_GEN)
            jj_buf_puts(I, b, "<generator object>");
        else
            write_seq(I, b, v.u.l->v, v.u.l->n, v.u.l->flags & JL_TUPLE, depth);
        return;
    case JK_DICT: write_dict(I, b, v.u.d, depth); return;
    case JK_NS:
        jj_buf_puts(I, b, "<Namespace ");
        write_dict(I, b, v.u.d, depth);
        jj_buf_puts(I, b, ">");
        return;
    case JK_VIEW: {
        const jdict *d = v.u.d;
        static const char *const names[] = {"dict_keys(", "dict_values(", "dict_items("};
        jj_buf_puts(I, b, names[d->which]);
        jj_buf_puts(I, b, "[");
        value_step(I, depth);
        for (size_t i = 0; i < d->n; i++) {
            if (i)
                jj_buf_puts(I, b, ", ");
            if (d->which == 0)
                repr_rec(I, b, d->keys[i], depth + 1);
            else if (d->which == 1)
                repr_rec(I, b, d->vals[i], depth + 1);
            else {
                jv pair[2] = {d->keys[i], d->vals[i]};
                write_seq(I, b, pair, 2, true, depth + 1);
            }
        }
        jj_buf_puts(I, b, "])");
        return;
    }
    case JK_MACRO: jj_buf_puts(I, b, "<Macro>"); return;
    case JK_FUNC: jj_buf_puts(I, b, "<built-in function>"); return;
    case JK_LOOP: jj_buf_puts(I, b, "<LoopContext>"); return;
    case JK_CYCLER: jj_buf_puts(I, b, "<Cycler>"); return;
    case JK_JOINER: jj_buf_puts(I, b, "<Joiner>"); return;
    }
}

void jj_write_repr(jinterp *I, jbuf *b, jv v)
{
    repr_rec(I, b, v, 0);
}

void jj_write_str(jinterp *I, jbuf *b, jv v)
{
    if (v.k == JK_STR)
        jj_buf_put(I, b, v.u.s->s, v.u.s->len);
    else if (v.k == JK_UNDEF)
        return;
    else
        jj_write_repr(I, b, v);
}

jv jj_to_str(jinterp *I, jv v)
{
    if (v.k == JK_STR)
        return v;
    jbuf b = {0};
    jj_write_str(I, &b, v);
    return jj_str(I, b.p ? b.p : "", b.n);
}

/* ---- iteration and length --------------------------------------------------------------- */

jlist *jj_iterate(jinterp *I, jv v, bool *ok)
{
    *ok = true;
    switch ((jk)v.k) {
    case JK_LIST:
        if (v.u.l->flags & JL_GEN) {
            if (v.u.l->flags & JL_CONSUMED)
                return jj_list(I, 0, 0).u.l;
            v.u.l->flags |= JL_CONSUMED;
        }
        return v.u.l;
    case JK_UNDEF: return jj_list(I, 0, 0).u.l;
    case JK_STR: {
        jlist *l = jj_list(I, v.u.s->len, 0).u.l;
        for (size_t i = 0; i < v.u.s->len;) {
            size_t n = sp_utf8_seq_len((const unsigned char *)v.u.s->s + i, v.u.s->len - i);
            if (!n)
                n = 1;
            jj_list_push(I, l, jj_str(I, v.u.s->s + i, n));
            i += n;
        }
        return l;
    }
    case JK_DICT:
    case JK_VIEW: {
        const jdict *d = v.u.d;
        int which = v.k == JK_VIEW ? d->which : 0;
        jlist *l = jj_list(I, d->n, 0).u.l;
        for (size_t i = 0; i < d->n; i++) {
            if (which == 0)
                jj_list_push(I, l, d->keys[i]);
            else if (which == 1)
                jj_list_push(I, l, d->vals[i]);
            else {
                jv t = jj_list(I, 2, JL_TUPLE);
                jj_list_push(I, t.u.l, d->keys[i]);
                jj_list_push(I, t.u.l, d->vals[i]);
                jj_list_push(I, l, t);
            }
        }
        return l;
    }
    default: *ok = false; return NULL;
    }
}

int64_t jj_len(jinterp *I, jv v)
{
    switch ((jk)v.k) {
    case JK_UNDEF: return 0;
    case JK_STR: return (int64_t)jj_utf8_len(v.u.s->s, v.u.s->len);
    case JK_LIST:
        if (!(v.u.l->flags & JL_GEN))
            return (int64_t)v.u.l->n;
        break;
    case JK_DICT:
    case JK_VIEW:
    case JK_NS: return (int64_t)v.u.d->n;
    default: break;
    }
    jj_fail(I, SP_ERR_TEMPLATE, "object of type '%s' has no len()", jj_type_name(v));
}

/* ---- JSON in ------------------------------------------------------------------------------ */

typedef struct jparse_ctx {
    jinterp *I;
    sp_jscan *j;
    char *buf;
    size_t cap;
    sp_error scan_err; /* the scanner's message, copied into the render's error */
} jparse_ctx;

_Noreturn static void json_fail(jparse_ctx *c)
{
    jj_fail(c->I, SP_ERR_FORMAT, "%s", c->scan_err.msg[0] ? c->scan_err.msg : "malformed JSON");
}

_Noreturn static void json_fail_at(jparse_ctx *c, size_t pos, const char *msg, const char *arg)
{
    char where[96];
    sp_jscan_where(c->j, pos, where, sizeof where);
    jj_fail(c->I, SP_ERR_FORMAT, "%s: %s%s at %s", c->j->what, msg, arg, where);
}

static jv json_value(jparse_ctx *c, int depth)
{
    jinterp *I = c->I;
    sp_jscan *j = c->j;
    if (depth > 256)
        json_fail_at(c, j->pos, "JSON nested more than 256 levels deep", "");
    char ch = sp_jscan_peek(j);
    size_t len;
    if (ch == '"') {
        if (!sp_jscan_string(j, &c->buf, &c->cap, &len))
            json_fail(c);
        return jj_str(I, c->buf, len);
    }
    if (ch == '{') {
        j->pos++;
        jv d = jj_dict(I, 0);
        bool first = true;
        while (sp_jscan_next(j, '}', &first)) {
            if (!sp_jscan_string(j, &c->buf, &c->cap, &len) || !sp_jscan_expect(j, ':'))
                break;
            jv k = jj_str(I, c->buf, len);
            jj_dict_set(I, d.u.d, k, json_value(c, depth + 1));
        }
        if (j->failed)
            json_fail(c);
        return d;
    }
    if (ch == '[') {
        j->pos++;
        jv l = jj_list(I, 0, 0);
        bool first = true;
        while (sp_jscan_next(j, ']', &first))
            jj_list_push(I, l.u.l, json_value(c, depth + 1));
        if (j->failed)
            json_fail(c);
        return l;
    }
    if (ch == 't' && j->pos + 4 <= j->n && !memcmp(j->s + j->pos, "true", 4)) {
        j->pos += 4;
        return jj_bool(true);
    }
    if (ch == 'f' && j->pos + 5 <= j->n && !memcmp(j->s + j->pos, "false", 5)) {
        j->pos += 5;
        return jj_bool(false);
    }
    if (ch == 'n' && j->pos + 4 <= j->n && !memcmp(j->s + j->pos, "null", 4)) {
        j->pos += 4;
        return jj_none();
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        size_t s = j->pos, e = s;
        bool is_float = false;
        while (e < j->n && strchr("+-0123456789.eE", j->s[e])) {
            is_float |= j->s[e] == '.' || j->s[e] == 'e' || j->s[e] == 'E';
            e++;
        }
        char num[64];
        if (e - s >= sizeof num)
            json_fail_at(c, s, "number too long", "");
        memcpy(num, j->s + s, e - s);
        num[e - s] = '\0';
        j->pos = e;
        char *end;
        if (!is_float) {
            errno = 0;
            long long v = strtoll(num, &end, 10);
            if (*end == '\0' && errno == ERANGE) /* Python's json gives a big int */
                json_fail_at(c, s, "integer does not fit in 64 bits: ", num);
            if (*end == '\0')
                return jj_int(v);
        }
        double f = strtod(num, &end);
        if (*end)
            json_fail_at(c, s, "bad number ", num);
        return jj_float(f);
    }
    json_fail_at(c, j->pos, "malformed JSON: unexpected character", "");
}

jv jj_from_json_text(jinterp *I, const char *text, size_t n, const char *what)
{
    sp_jscan j;
    jparse_ctx c = {I, &j, NULL, 0, {0}};
    sp_jscan_init(&j, text, n, what, &c.scan_err);
    /* the scanner's string buffer is malloc'd: keep it on the arena's free path */
    jv v;
    jmp_buf saved;
    memcpy(saved, I->fail, sizeof saved);
    if (setjmp(I->fail)) {
        free(c.buf);
        memcpy(I->fail, saved, sizeof saved);
        longjmp(I->fail, 1);
    }
    v = json_value(&c, 0);
    if (sp_jscan_peek(&j) != 0) {
        free(c.buf);
        memcpy(I->fail, saved, sizeof saved);
        json_fail_at(&c, j.pos, "trailing data after the JSON value", "");
    }
    free(c.buf);
    memcpy(I->fail, saved, sizeof saved);
    return v;
}

/* ---- JSON out (json.dumps) --------------------------------------------------------------- */

static void json_string(jinterp *I, jbuf *b, const char *s, size_t n, bool ascii)
{
    jj_buf_puts(I, b, "\"");
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        char tmp[16];
        if (c == '"' || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)c;
            jj_buf_put(I, b, tmp, 2);
            i++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': jj_buf_puts(I, b, "\\n"); break;
            case '\r': jj_buf_puts(I, b, "\\r"); break;
            case '\t': jj_buf_puts(I, b, "\\t"); break;
            case '\b': jj_buf_puts(I, b, "\\b"); break;
            case '\f': jj_buf_puts(I, b, "\\f"); break;
            default:
                snprintf(tmp, sizeof tmp, "\\u%04x", c);
                jj_buf_puts(I, b, tmp);
            }
            i++;
        } else if (c >= 0x80 && ascii) {
            uint32_t cp;
            size_t l = sp_utf8_decode((const unsigned char *)s + i, n - i, &cp);
            if (!l) {
                cp = 0xfffd;
                l = 1;
            }
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            } else {
                snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            }
            jj_buf_puts(I, b, tmp);
            i += l;
        } else {
            jj_buf_put(I, b, s + i, 1);
            i++;
        }
    }
    jj_buf_puts(I, b, "\"");
}

static void json_float(jinterp *I, jbuf *b, double f)
{
    if (isnan(f))
        jj_buf_puts(I, b, "NaN");
    else if (isinf(f))
        jj_buf_puts(I, b, f < 0 ? "-Infinity" : "Infinity");
    else
        jj_write_float(I, b, f);
}

static void json_newline(jinterp *I, jbuf *b, const char *indent, int level)
{
    jj_buf_puts(I, b, "\n");
    for (int i = 0; i < level; i++)
        jj_buf_puts(I, b, indent);
}

/* A dict key as json.dumps converts it. */
static void json_key(jinterp *I, jbuf *b, jv k, bool ascii)
{
    char tmp[64];
    switch ((jk)k.k) {
    case JK_STR: json_string(I, b, k.u.s->s, k.u.s->len, ascii); return;
    case JK_INT:
        snprintf(tmp, sizeof tmp, "\"%lld\"", (long long)k.u.i);
        jj_buf_puts(I, b, tmp);
        return;
    case JK_BOOL: jj_buf_puts(I, b, k.u.b ? "\"true\"" : "\"false\""); return;
    case JK_NONE: jj_buf_puts(I, b, "\"null\""); return;
    case JK_FLOAT:
        jj_buf_puts(I, b, "\"");
        json_float(I, b, k.u.f);
        jj_buf_puts(I, b, "\"");
        return;
    default:
        jj_fail(I, SP_ERR_TEMPLATE, "keys must be str, int, float, bool or None, not %s",
              jj_type_name(k));
    }
}

static jdict *sorted_dict(jinterp *I, const jdict *d)
{
    jdict *s = jj_dict(I, d->n).u.d;
    if (d->n) {
        memcpy(s->keys, d->keys, d->n * sizeof *s->keys);
        memcpy(s->vals, d->vals, d->n * sizeof *s->vals);
    }
    jj_sort_by(I, s->vals, s->keys, d->n, false); /* sorted(d.items()): keys are unique */
    s->n = d->n;
    return s;
}

void jj_tojson(jinterp *I, jbuf *b, jv v, const char *indent, const char *item_sep,
               const char *key_sep, bool sort_keys, bool ascii, int level)
{
    char tmp[64];
    jj_tick(I);
    if (level > JINJA_MAX_VALUE_DEPTH)
        jj_fail(I, SP_ERR_TEMPLATE, "tojson: value nested too deeply");
    switch ((jk)v.k) {
    case JK_NONE: jj_buf_puts(I, b, "null"); return;
    case JK_BOOL: jj_buf_puts(I, b, v.u.b ? "true" : "false"); return;
    case JK_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        jj_buf_puts(I, b, tmp);
        return;
    case JK_FLOAT: json_float(I, b, v.u.f); return;
    case JK_STR: json_string(I, b, v.u.s->s, v.u.s->len, ascii); return;
    case JK_LIST:
        if (!(v.u.l->flags & JL_GEN)) {
            const jlist *l = v.u.l;
            if (!l->n) {
                jj_buf_puts(I, b, "[]");
                return;
            }
            jj_buf_puts(I, b, "[");
            for (size_t i = 0; i < l->n; i++) {
                if (i)
                    jj_buf_puts(I, b, item_sep);
                if (indent)
                    json_newline(I, b, indent, level + 1);
                jj_tojson(I, b, l->v[i], indent, item_sep, key_sep, sort_keys, ascii, level + 1);
            }
            if (indent)
                json_newline(I, b, indent, level);
            jj_buf_puts(I, b, "]");
            return;
        }
        break;
    case JK_DICT: {
        const jdict *d = sort_keys ? sorted_dict(I, v.u.d) : v.u.d;
        if (!d->n) {
            jj_buf_puts(I, b, "{}");
            return;
        }
        jj_buf_puts(I, b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i)
                jj_buf_puts(I, b, item_sep);
            if (indent)
                json_newline(I, b, indent, level + 1);
            json_key(I, b, d->keys[i], ascii);
            jj_buf_puts(I, b, key_sep);
            jj_tojson(I, b, d->vals[i], indent, item_sep, key_sep, sort_keys, ascii, level + 1);
        }
        if (indent)
            json_newline(I, b, indent, level);
        jj_buf_puts(I, b, "}");
        return;
    }
    default: break;
    }
    jj_fail(I, SP_ERR_TEMPLATE, "Object of type %s is not JSON serializable", jj_type_name(v));
}
