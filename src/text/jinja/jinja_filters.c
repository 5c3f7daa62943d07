/* jinja_filters.c: Jinja2's built-in filters and tests (jinja2/filters.py, tests.py) with
 * their Python semantics, plus transformers' tojson. select/reject/map/unique/reverse
 * return generators, as in Jinja2: |length on them fails, |list materializes them. */
#include "text/jinja/jinja_internal.h"
#include "util/utf8.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>


static bool arg_bool(jinterp *I, const jargs *A, size_t i, const char *name, bool def)
{
    return jj_truthy(I, jarg(A, i, name, jj_bool(def)));
}

static jv need_str(jinterp *I, jv v, const char *what)
{
    if (v.k == JK_UNDEF)
        return jj_cstr(I, "");
    if (v.k != JK_STR)
        return jj_to_str(I, v);
    (void)what;
    return v;
}

static jlist *need_iter(jinterp *I, jv v, const char *filter)
{
    bool ok;
    jlist *l = jj_iterate(I, v, &ok);
    if (!ok)
        jj_fail(I, SP_ERR_TEMPLATE, "%s: '%s' object is not iterable", filter, jj_type_name(v));
    return l;
}

static jv gen(jinterp *I)
{
    return jj_list(I, 0, JL_GEN);
}

/* Jinja's make_attrgetter: dotted attribute path, digits index, looked up like x[part]. */
static jv attr_path(jinterp *I, jv v, jv path)
{
    if (path.k == JK_INT)
        return jj_getitem(I, v, path);
    if (path.k != JK_STR)
        jj_fail(I, SP_ERR_TEMPLATE, "attribute must be a string");
    const char *s = path.u.s->s;
    while (*s) {
        const char *dot = strchr(s, '.');
        size_t n = dot ? (size_t)(dot - s) : strlen(s);
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++)
            digits &= s[i] >= '0' && s[i] <= '9';
        jv key = digits ? jj_int(strtoll(s, NULL, 10)) : jj_str(I, s, n);
        v = jj_getitem(I, v, key);
        s += n + (dot ? 1 : 0);
        if (!dot)
            break;
    }
    return v;
}

static jv lower_if_str(jinterp *I, jv v, bool case_sensitive);

/* ---- strings ------------------------------------------------------------------------------- */


static jv f_title(jinterp *I, jv s, const jargs *A, jframe *f)
{
    /* jinja's title: split at runs of [-\s({\[<], then item[0].upper() + item[1:].lower() */
    s = need_str(I, s, "title");
    jbuf b = {0};
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0;
    while (i < n) {
        size_t j = i;
        bool sep = false;
        for (;;) {
            if (j >= n)
                break;
            uint32_t cp;
            size_t l = sp_utf8_decode((const unsigned char *)p + j, n - j, &cp);
            bool is_sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jj_is_space(cp);
            if (j == i)
                sep = is_sep;
            else if (is_sep != sep)
                break;
            j += l ? l : 1;
        }
        jv item = jj_str(I, p + i, j - i);
        if (sep) {
            jj_buf_put(I, &b, p + i, j - i);
        } else {
            size_t l1 = sp_utf8_seq_len((const unsigned char *)p + i, j - i);
            jv first = jj_str_case(I, jj_str(I, p + i, l1 ? l1 : 1), 1);
            jv rest = jj_str_case(I, jj_str(I, p + i + (l1 ? l1 : 1), j - i - (l1 ? l1 : 1)), 0);
            jj_buf_put(I, &b, first.u.s->s, first.u.s->len);
            jj_buf_put(I, &b, rest.u.s->s, rest.u.s->len);
        }
        (void)item;
        i = j;
    }
    return jj_str(I, b.p ? b.p : "", b.n);
}

/* Python str.splitlines(). */
static jlist *splitlines(jinterp *I, jv s)
{
    jlist *l = jj_list(I, 0, 0).u.l;
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, start = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t len = sp_utf8_decode((const unsigned char *)p + i, n - i, &cp);
        if (!len)
            len = 1;
        bool brk = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d ||
                   cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (brk) {
            jj_list_push(I, l, jj_str(I, p + start, i - start));
            if (cp == '\r' && i + 1 < n && p[i + 1] == '\n')
                len = 2;
            start = i + len;
        }
        i += len;
    }
    if (start < n)
        jj_list_push(I, l, jj_str(I, p + start, n - start));
    return l;
}

static jv f_indent(jinterp *I, jv s, const jargs *A, jframe *f)
{
    s = need_str(I, s, "indent");
    jv width = jarg(A, 0, "width", jj_int(4));
    bool first = arg_bool(I, A, 1, "first", false), blank = arg_bool(I, A, 2, "blank", false);
    jbuf ind = {0};
    if (width.k == JK_STR)
        jj_buf_put(I, &ind, width.u.s->s, width.u.s->len);
    else
        for (int64_t i = 0; i < (width.k == JK_INT ? width.u.i : 0); i++)
            jj_buf_puts(I, &ind, " ");
    if (!ind.p)
        jj_buf_puts(I, &ind, "");
    jbuf t = {0};
    jj_buf_put(I, &t, s.u.s->s, s.u.s->len);
    jj_buf_puts(I, &t, "\n"); /* Jinja appends a newline so splitlines keeps a trailing blank line */
    jlist *lines = splitlines(I, jj_str(I, t.p, t.n));
    jbuf b = {0};
    if (first)
        jj_buf_put(I, &b, ind.p, ind.n);
    for (size_t i = 0; i < lines->n; i++) {
        jv line = lines->v[i];
        if (i) {
            jj_buf_puts(I, &b, "\n");
            if (blank || line.u.s->len)
                jj_buf_put(I, &b, ind.p, ind.n);
        }
        jj_buf_put(I, &b, line.u.s->s, line.u.s->len);
    }
    return jj_str(I, b.p ? b.p : "", b.n);
}

/* markupsafe.escape: a Markup string comes back unchanged unless forced. */
jv jj_html_escape(jinterp *I, jv s, bool force)
{
    if (s.k == JK_STR && s.safe && !force)
        return s;
    s = need_str(I, s, "escape");
    jbuf b = {0};
    for (size_t i = 0; i < s.u.s->len; i++) {
        char c = s.u.s->s[i];
        const char *r = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;"
                        : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        if (r)
            jj_buf_puts(I, &b, r);
        else
            jj_buf_put(I, &b, &c, 1);
    }
    jv r = jj_str(I, b.p ? b.p : "", b.n);
    r.safe = 1;
    return r;
}

/* ---- numbers ------------------------------------------------------------------------------ */

static bool parse_py_int(jinterp *I, const char *s, size_t n, int64_t base, int64_t *out)
{
    char buf[128];
    size_t o = 0;
    size_t i = 0;
    while (i < n && jj_is_space((unsigned char)s[i]))
        i++;
    while (n > i && jj_is_space((unsigned char)s[n - 1]))
        n--;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        buf[o++] = s[i++];
    if (base == 16 && n - i > 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X'))
        i += 2;
    if (i >= n)
        return false;
    for (; i < n && o + 1 < sizeof buf; i++) {
        if (s[i] == '_' && i + 1 < n && s[i + 1] != '_' && o > 0 && buf[o - 1] != '-' && buf[o - 1] != '+')
            continue;
        buf[o++] = s[i];
    }
    buf[o] = '\0';
    if (base != 0 && (base < 2 || base > 36))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, (int)base);
    if (*end || end == buf)
        return false;
    if (errno == ERANGE)
        jj_int_overflow(I, "int");
    *out = v;
    return true;
}

static bool parse_py_float(const char *s, size_t n, double *out)
{
    char buf[128];
    size_t o = 0, i = 0;
    while (i < n && jj_is_space((unsigned char)s[i]))
        i++;
    while (n > i && jj_is_space((unsigned char)s[n - 1]))
        n--;
    for (; i < n && o + 1 < sizeof buf; i++)
        if (s[i] != '_')
            buf[o++] = s[i];
    buf[o] = '\0';
    if (!o)
        return false;
    char *end;
    double v = strtod(buf, &end);
    if (*end)
        return false;
    *out = v;
    return true;
}

static jv f_int(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv def = jarg(A, 0, "default", jj_int(0));
    int64_t base = 10;
    jv b = jarg(A, 1, "base", jj_int(10));
    if (b.k == JK_INT)
        base = b.u.i;
    switch ((jk)v.k) {
    case JK_INT: return v;
    case JK_BOOL: return jj_int(v.u.b);
    case JK_FLOAT:
        if (!isfinite(v.u.f))
            return def;
        return jj_int(jj_int_from_double(I, v.u.f, "int"));
    case JK_STR: {
        int64_t i;
        double d;
        if (parse_py_int(I, v.u.s->s, v.u.s->len, base, &i))
            return jj_int(i);
        if (parse_py_float(v.u.s->s, v.u.s->len, &d) && isfinite(d))
            return jj_int(jj_int_from_double(I, d, "int"));
        return def;
    }
    default: return def;
    }
}

static jv f_float(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv def = jarg(A, 0, "default", jj_float(0.0));
    (void)I;
    switch ((jk)v.k) {
    case JK_INT: return jj_float((double)v.u.i);
    case JK_BOOL: return jj_float(v.u.b);
    case JK_FLOAT: return v;
    case JK_STR: {
        double d;
        return parse_py_float(v.u.s->s, v.u.s->len, &d) ? jj_float(d) : def;
    }
    default: return def;
    }
}

static jv f_round(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv p = jarg(A, 0, "precision", jj_int(0));
    jv m = jarg(A, 1, "method", jj_cstr(I, "common"));
    if (v.k == JK_UNDEF)
        jj_fail(I, SP_ERR_TEMPLATE, "'%s' is undefined", v.u.undef ? v.u.undef : "value");
    if (!jj_is_num(v))
        jj_fail(I, SP_ERR_TEMPLATE, "round: '%s' is not a number", jj_type_name(v));
    int64_t prec = p.k == JK_INT ? p.u.i : 0;
    double x = jj_num(v), scale = pow(10.0, (double)prec);
    const char *method = m.k == JK_STR ? m.u.s->s : "common";
    if (!strcmp(method, "common")) {
        if (v.k != JK_FLOAT)
            return v.k == JK_BOOL ? jj_int(v.u.b) : v;
        double r = nearbyint(x * scale) / scale; /* Python round(): half to even */
        return jj_float(r);
    }
    if (!strcmp(method, "floor"))
        return jj_float(floor(x * scale) / scale);
    if (!strcmp(method, "ceil"))
        return jj_float(ceil(x * scale) / scale);
    jj_fail(I, SP_ERR_TEMPLATE, "method must be common, ceil or floor");
}

/* ---- sequences ----------------------------------------------------------------------------- */

static jv lower_if_str(jinterp *I, jv v, bool case_sensitive)
{
    return !case_sensitive && v.k == JK_STR ? jj_str_case(I, v, 0) : v;
}

static jv f_sort(jinterp *I, jv v, const jargs *A, jframe *f)
{
    bool reverse = arg_bool(I, A, 0, "reverse", false), cs = arg_bool(I, A, 1, "case_sensitive", false);
    jv attr = jarg(A, 2, "attribute", jj_none());
    jlist *src = need_iter(I, v, "sort");
    jv out = jj_list(I, src->n, 0);
    jv *keys = jj_alloc(I, (src->n ? src->n : 1) * sizeof *keys);
    for (size_t i = 0; i < src->n; i++) {
        out.u.l->v[i] = src->v[i];
        jv k = attr.k == JK_NONE ? src->v[i] : attr_path(I, src->v[i], attr);
        keys[i] = lower_if_str(I, k, cs);
    }
    out.u.l->n = src->n;
    jj_sort_by(I, out.u.l->v, keys, src->n, reverse);
    return out;
}

static jv f_dictsort(jinterp *I, jv v, const jargs *A, jframe *f)
{
    bool cs = arg_bool(I, A, 0, "case_sensitive", false);
    jv by = jarg(A, 1, "by", jj_cstr(I, "key"));
    bool reverse = arg_bool(I, A, 2, "reverse", false);
    if (v.k != JK_DICT)
        jj_fail(I, SP_ERR_TEMPLATE, "dictsort: expected a mapping, got '%s'", jj_type_name(v));
    int pos = by.k == JK_STR && !strcmp(by.u.s->s, "value") ? 1 : 0;
    if (by.k == JK_STR && strcmp(by.u.s->s, "key") && strcmp(by.u.s->s, "value"))
        jj_fail(I, SP_ERR_TEMPLATE, "You can only sort by either \"key\" or \"value\"");
    size_t n = v.u.d->n;
    jv out = jj_list(I, n, 0);
    jv *keys = jj_alloc(I, (n ? n : 1) * sizeof *keys);
    for (size_t i = 0; i < n; i++) {
        jv t = jj_list(I, 2, JL_TUPLE);
        jj_list_push(I, t.u.l, v.u.d->keys[i]);
        jj_list_push(I, t.u.l, v.u.d->vals[i]);
        out.u.l->v[i] = t;
        keys[i] = lower_if_str(I, pos ? v.u.d->vals[i] : v.u.d->keys[i], cs);
    }
    out.u.l->n = n;
    jj_sort_by(I, out.u.l->v, keys, n, reverse);
    return out;
}

static jv f_unique(jinterp *I, jv v, const jargs *A, jframe *f)
{
    bool cs = arg_bool(I, A, 0, "case_sensitive", false);
    jv attr = jarg(A, 1, "attribute", jj_none());
    jlist *src = need_iter(I, v, "unique");
    jv out = gen(I);
    jlist *seen = jj_list(I, 0, 0).u.l;
    for (size_t i = 0; i < src->n; i++) {
        jv k = lower_if_str(I, attr.k == JK_NONE ? src->v[i] : attr_path(I, src->v[i], attr), cs);
        bool dup = false;
        for (size_t j = 0; j < seen->n && !dup; j++)
            dup = jj_equal(I, seen->v[j], k);
        if (!dup) {
            jj_list_push(I, seen, k);
            jj_list_push(I, out.u.l, src->v[i]);
        }
    }
    return out;
}

static jv f_minmax(jinterp *I, jv v, const jargs *A, bool want_max)
{
    bool cs = arg_bool(I, A, 0, "case_sensitive", false);
    jv attr = jarg(A, 1, "attribute", jj_none());
    jlist *src = need_iter(I, v, want_max ? "max" : "min");
    if (!src->n)
        return jj_undef("No aggregated item, sequence was empty.");
    jv best = src->v[0];
    jv bk = lower_if_str(I, attr.k == JK_NONE ? best : attr_path(I, best, attr), cs);
    for (size_t i = 1; i < src->n; i++) {
        jv k = lower_if_str(I, attr.k == JK_NONE ? src->v[i] : attr_path(I, src->v[i], attr), cs);
        int c = jj_compare(I, k, bk);
        if (want_max ? c > 0 : c < 0) {
            best = src->v[i];
            bk = k;
        }
    }
    return best;
}

/* select / reject / selectattr / rejectattr */
static jv f_select(jinterp *I, jv v, const jargs *A, bool want, bool by_attr, jframe *f)
{
    if (!jj_truthy(I, v)) /* Jinja2 tests `if value:` first: None/empty select nothing */
        return gen(I);
    jlist *src = need_iter(I, v, "select");
    size_t first = 0;
    jv attr = jj_none();
    if (by_attr) {
        if (A->n < 1)
            jj_fail(I, SP_ERR_TEMPLATE, "selectattr/rejectattr need an attribute name");
        attr = A->a[0];
        first = 1;
    }
    const char *test = NULL;
    if (A->n > first) {
        if (A->a[first].k != JK_STR)
            jj_fail(I, SP_ERR_TEMPLATE, "the test name must be a string");
        test = A->a[first].u.s->s;
        if (!jj_test_exists(test))
            jj_fail(I, SP_ERR_TEMPLATE, "No test named '%s'.", test);
    }
    jv out = gen(I);
    for (size_t i = 0; i < src->n; i++) {
        jv item = by_attr ? attr_path(I, src->v[i], attr) : src->v[i];
        bool r = test ? jj_test_apply(I, test, item, A->a + first + 1, A->n - first - 1, f)
                      : jj_truthy(I, item);
        if (r == want)
            jj_list_push(I, out.u.l, src->v[i]);
    }
    return out;
}

static jv f_map(jinterp *I, jv v, const jargs *A, jframe *f)
{
    if (!jj_truthy(I, v)) /* as select: `if value:` first */
        return gen(I);
    jlist *src = need_iter(I, v, "map");
    jv out = gen(I);
    jv attr = jj_undef(NULL), def = jj_undef(NULL);
    bool has_default = false;
    for (size_t k = 0; k < A->nk; k++) {
        if (!strcmp(A->kn[k], "attribute"))
            attr = A->kv[k];
        else if (!strcmp(A->kn[k], "default")) {
            def = A->kv[k];
            has_default = true;
        }
    }
    if (attr.k != JK_UNDEF) {
        for (size_t i = 0; i < src->n; i++) {
            jv x = attr_path(I, src->v[i], attr);
            jj_list_push(I, out.u.l, x.k == JK_UNDEF && has_default ? def : x);
        }
        return out;
    }
    if (A->n < 1 || A->a[0].k != JK_STR)
        jj_fail(I, SP_ERR_TEMPLATE, "map requires a filter argument");
    const char *name = A->a[0].u.s->s;
    if (!jj_filter_exists(name))
        jj_fail(I, SP_ERR_TEMPLATE, "No filter named '%s'.", name);
    for (size_t i = 0; i < src->n; i++)
        jj_list_push(I, out.u.l, jj_filter_apply(I, name, src->v[i], A->a + 1, A->n - 1, A->kn, A->kv, A->nk, f));
    return out;
}

static jv f_join(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv d = jarg(A, 0, "d", jj_cstr(I, ""));
    jv attr = jarg(A, 1, "attribute", jj_none());
    jlist *src = need_iter(I, v, "join");
    jbuf b = {0};
    for (size_t i = 0; i < src->n; i++) {
        if (i)
            jj_write_str(I, &b, d);
        jj_write_str(I, &b, attr.k == JK_NONE ? src->v[i] : attr_path(I, src->v[i], attr));
    }
    return jj_str(I, b.p ? b.p : "", b.n);
}

static jv f_items(jinterp *I, jv v, const jargs *A, jframe *f)
{
    if (v.k == JK_UNDEF)
        return gen(I);
    if (v.k != JK_DICT)
        jj_fail(I, SP_ERR_TEMPLATE, "Can only get item pairs from a mapping.");
    jdict *d = jj_alloc(I, sizeof *d);
    *d = *v.u.d;
    d->which = 2;
    jv out = {.k = JK_VIEW, .u = {.d = d}};
    bool ok;
    jv g = gen(I);
    jlist *items = jj_iterate(I, out, &ok);
    for (size_t i = 0; i < items->n; i++)
        jj_list_push(I, g.u.l, items->v[i]);
    return g;
}

static jv f_reverse(jinterp *I, jv v, const jargs *A, jframe *f)
{
    if (v.k == JK_STR) {
        bool ok;
        jlist *c = jj_iterate(I, v, &ok);
        jbuf b = {0};
        for (size_t i = c->n; i-- > 0;)
            jj_buf_put(I, &b, c->v[i].u.s->s, c->v[i].u.s->len);
        return jj_str(I, b.p ? b.p : "", b.n);
    }
    jlist *src = need_iter(I, v, "reverse");
    jv out = gen(I);
    for (size_t i = src->n; i-- > 0;)
        jj_list_push(I, out.u.l, src->v[i]);
    return out;
}

static jv f_batch(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv lc = jarg(A, 0, "linecount", jj_int(1));
    jv fill = jarg(A, 1, "fill_with", jj_none());
    if (lc.k != JK_INT || lc.u.i < 1)
        jj_fail(I, SP_ERR_TEMPLATE, "batch: linecount must be a positive integer");
    jlist *src = need_iter(I, v, "batch");
    jv out = gen(I);
    for (size_t i = 0; i < src->n; i += (size_t)lc.u.i) {
        jv row = jj_list(I, 0, 0);
        for (size_t k = i; k < i + (size_t)lc.u.i; k++) {
            if (k < src->n)
                jj_list_push(I, row.u.l, src->v[k]);
            else if (fill.k != JK_NONE)
                jj_list_push(I, row.u.l, fill);
        }
        jj_list_push(I, out.u.l, row);
    }
    return out;
}

/* slice(n, fill_with): n columns, the first len % n one longer (Jinja's do_slice). */
static jv f_slice(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv ns = jarg(A, 0, "slices", jj_undef("slices"));
    jv fill = jarg(A, 1, "fill_with", jj_none());
    if (ns.k != JK_INT || ns.u.i < 1)
        jj_fail(I, SP_ERR_TEMPLATE, "slice: slices must be a positive integer");
    jlist *src = need_iter(I, v, "slice");
    size_t slices = (size_t)ns.u.i, per = src->n / slices, extra = src->n % slices, offset = 0;
    jv out = gen(I);
    for (size_t k = 0; k < slices; k++) {
        jj_tick(I);
        size_t start = offset + k * per;
        if (k < extra)
            offset++;
        size_t end = offset + (k + 1) * per;
        jv col = jj_list(I, end - start + 1, 0);
        for (size_t i = start; i < end && i < src->n; i++)
            jj_list_push(I, col.u.l, src->v[i]);
        if (fill.k != JK_NONE && k >= extra)
            jj_list_push(I, col.u.l, fill);
        jj_list_push(I, out.u.l, col);
    }
    return out;
}

/* groupby(attribute, default, case_sensitive): sorted by the key, consecutive equal keys
 * grouped; each group is a (grouper, list) tuple whose grouper is the first item's key. */
static jv f_groupby(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv attr = jarg(A, 0, "attribute", jj_undef("attribute"));
    jv def = jarg(A, 1, "default", jj_none());
    bool cs = arg_bool(I, A, 2, "case_sensitive", false);
    jlist *src = need_iter(I, v, "groupby");
    size_t n = src->n;
    jv *items = jj_alloc(I, (n ? n : 1) * sizeof *items), *keys = jj_alloc(I, (n ? n : 1) * sizeof *keys);
    for (size_t i = 0; i < n; i++) {
        items[i] = src->v[i];
        jv k = attr_path(I, src->v[i], attr);
        if (k.k == JK_UNDEF && def.k != JK_NONE)
            k = def;
        keys[i] = lower_if_str(I, k, cs);
    }
    jj_sort_by(I, items, keys, n, false);
    jv out = jj_list(I, 0, 0);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && jj_equal(I, keys[j], keys[i]))
            j++;
        jv group = jj_list(I, j - i, 0);
        for (size_t k = i; k < j; k++)
            jj_list_push(I, group.u.l, items[k]);
        jv grouper = attr_path(I, items[i], attr);
        if (grouper.k == JK_UNDEF && def.k != JK_NONE)
            grouper = def;
        jv t = jj_list(I, 2, JL_TUPLE | JL_GROUP);
        jj_list_push(I, t.u.l, cs ? keys[i] : grouper);
        jj_list_push(I, t.u.l, group);
        jj_list_push(I, out.u.l, t);
        i = j;
    }
    return out;
}

/* Byte offset of code point `cp` in s (or its length). */
static size_t cp_offset(jv s, size_t cp)
{
    const char *p = s.u.s->s;
    size_t i = 0, n = s.u.s->len;
    for (; i < n && cp; cp--) {
        i++;
        while (i < n && (p[i] & 0xC0) == 0x80)
            i++;
    }
    return i;
}

/* truncate(length=255, killwords=False, end='...', leeway=5) as Jinja's do_truncate. */
static jv f_truncate(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv s = need_str(I, v, "truncate");
    jv len = jarg(A, 0, "length", jj_int(255));
    bool kill = arg_bool(I, A, 1, "killwords", false);
    jv end = need_str(I, jarg(A, 2, "end", jj_cstr(I, "...")), "truncate");
    jv lee = jarg(A, 3, "leeway", jj_int(5));
    if (len.k != JK_INT || lee.k != JK_INT)
        jj_fail(I, SP_ERR_TEMPLATE, "truncate: length and leeway must be integers");
    int64_t n_end = (int64_t)jj_utf8_len(end.u.s->s, end.u.s->len);
    if (len.u.i < n_end)
        jj_fail(I, SP_ERR_TEMPLATE, "AssertionError: expected length >= %lld, got %lld",
              (long long)n_end, (long long)len.u.i);
    if (lee.u.i < 0)
        jj_fail(I, SP_ERR_TEMPLATE, "AssertionError: expected leeway >= 0, got %lld", (long long)lee.u.i);
    int64_t limit;
    if (__builtin_add_overflow(len.u.i, lee.u.i, &limit) || (int64_t)jj_utf8_len(s.u.s->s, s.u.s->len) <= limit)
        return s; /* both are >= 0 here: an overflow means a limit no string reaches */
    size_t cut = cp_offset(s, (size_t)(len.u.i - n_end));
    if (!kill) /* s[:cut].rsplit(" ", 1)[0] */
        for (size_t i = cut; i-- > 0;)
            if (s.u.s->s[i] == ' ') {
                cut = i;
                break;
            }
    jbuf b = {0};
    jj_buf_put(I, &b, s.u.s->s, cut);
    jj_buf_put(I, &b, end.u.s->s, end.u.s->len);
    return jj_str(I, b.p ? b.p : "", b.n);
}

/* Werkzeug-style url_quote: UTF-8 bytes, unreserved ALPHA DIGIT _.-~ kept, '/' kept
 * unless for a query string, where spaces become '+'. */
static void url_quote(jinterp *I, jbuf *b, jv v, bool for_qs)
{
    jv s = need_str(I, v, "urlencode");
    for (size_t i = 0; i < s.u.s->len; i++) {
        unsigned char c = (unsigned char)s.u.s->s[i];
        bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-' || c == '~' || (c == '/' && !for_qs);
        char hex[4];
        if (keep)
            jj_buf_put(I, b, (const char *)&c, 1);
        else if (c == ' ' && for_qs)
            jj_buf_puts(I, b, "+");
        else {
            snprintf(hex, sizeof hex, "%%%02X", c);
            jj_buf_puts(I, b, hex);
        }
    }
}

static jv f_urlencode(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jbuf b = {0};
    if (v.k == JK_DICT || (v.k == JK_LIST && !(v.u.l->flags & JL_GEN))) {
        bool dict = v.k == JK_DICT;
        size_t n = dict ? v.u.d->n : v.u.l->n;
        for (size_t i = 0; i < n; i++) {
            jv k, val;
            if (dict) {
                k = v.u.d->keys[i];
                val = v.u.d->vals[i];
            } else {
                jv pair = v.u.l->v[i];
                if (pair.k != JK_LIST || pair.u.l->n != 2)
                    jj_fail(I, SP_ERR_TEMPLATE, "urlencode: expected (key, value) pairs");
                k = pair.u.l->v[0];
                val = pair.u.l->v[1];
            }
            if (i)
                jj_buf_puts(I, &b, "&");
            url_quote(I, &b, k, true);
            jj_buf_puts(I, &b, "=");
            url_quote(I, &b, val, true);
        }
    } else {
        url_quote(I, &b, v, false);
    }
    return jj_str(I, b.p ? b.p : "", b.n);
}

/* xmlattr(autospace=True): key="value" pairs, None/undefined values skipped, escaped. */
static jv f_xmlattr(jinterp *I, jv v, const jargs *A, jframe *f)
{
    bool autospace = arg_bool(I, A, 0, "autospace", true);
    if (v.k != JK_DICT)
        jj_fail(I, SP_ERR_TEMPLATE, "xmlattr: expected a mapping, got '%s'", jj_type_name(v));
    jbuf b = {0};
    for (size_t i = 0; i < v.u.d->n; i++) {
        jv k = v.u.d->keys[i], val = v.u.d->vals[i];
        if (val.k == JK_NONE || val.k == JK_UNDEF)
            continue;
        k = need_str(I, k, "xmlattr");
        for (size_t c = 0; c < k.u.s->len; c++)
            if (strchr(" \t\n\r\f\v/>=", k.u.s->s[c]) && k.u.s->s[c])
                jj_fail(I, SP_ERR_TEMPLATE, "ValueError: Invalid character in attribute name: '%s'", k.u.s->s);
        if (b.n || autospace)
            jj_buf_puts(I, &b, " ");
        jv ek = jj_html_escape(I, k, false), ev = jj_html_escape(I, val, false);
        jj_buf_put(I, &b, ek.u.s->s, ek.u.s->len);
        jj_buf_puts(I, &b, "=\"");
        jj_buf_put(I, &b, ev.u.s->s, ev.u.s->len);
        jj_buf_puts(I, &b, "\"");
    }
    return jj_str(I, b.p ? b.p : "", b.n);
}

static jv f_tojson(jinterp *I, jv v, const jargs *A, jframe *f)
{
    bool ascii = arg_bool(I, A, 0, "ensure_ascii", false);
    jv indent = jarg(A, 1, "indent", jj_none());
    jv seps = jarg(A, 2, "separators", jj_none());
    bool sort_keys = arg_bool(I, A, 3, "sort_keys", false);
    const char *ind = NULL;
    jbuf ib = {0};
    if (indent.k == JK_INT) {
        for (int64_t i = 0; i < indent.u.i && i < 1024; i++)
            jj_buf_puts(I, &ib, " ");
        ind = ib.p ? ib.p : "";
    } else if (indent.k == JK_STR) {
        ind = indent.u.s->s;
    } else if (indent.k != JK_NONE) {
        jj_fail(I, SP_ERR_TEMPLATE, "tojson: indent must be an integer or a string");
    }
    const char *item_sep = ind ? "," : ", ", *key_sep = ": ";
    if (seps.k == JK_LIST && !(seps.u.l->flags & JL_GEN)) {
        if (seps.u.l->n != 2 || seps.u.l->v[0].k != JK_STR || seps.u.l->v[1].k != JK_STR)
            jj_fail(I, SP_ERR_TEMPLATE, "tojson: separators must be two strings");
        item_sep = seps.u.l->v[0].u.s->s;
        key_sep = seps.u.l->v[1].u.s->s;
    }
    jbuf b = {0};
    jj_tojson(I, &b, v, ind, item_sep, key_sep, sort_keys, ascii, 0);
    return jj_str(I, b.p ? b.p : "", b.n);
}

static jv f_sum(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv attr = jarg(A, 0, "attribute", jj_none());
    jv total = jarg(A, 1, "start", jj_int(0));
    jlist *src = need_iter(I, v, "sum");
    for (size_t i = 0; i < src->n; i++)
        total = jj_binop(I, OP_ADD, total, attr.k == JK_NONE ? src->v[i] : attr_path(I, src->v[i], attr));
    return total;
}

static jv f_center(jinterp *I, jv s, const jargs *A, jframe *f)
{
    jv w = jarg(A, 0, "width", jj_int(80));
    return jj_str_pad(I, need_str(I, s, "center"), w.k == JK_INT ? w.u.i : 80, ' ', 0);
}

static jv f_wordcount(jinterp *I, jv s, const jargs *A, jframe *f)
{
    s = need_str(I, s, "wordcount");
    int64_t n = 0;
    bool in = false;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t cp;
        size_t l = sp_utf8_decode((const unsigned char *)s.u.s->s + i, s.u.s->len - i, &cp);
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        bool w = cp == '_' || (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
                 c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO ||
                 c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC;
        if (w && !in)
            n++;
        in = w;
        i += l ? l : 1;
    }
    return jj_int(n);
}

/* ---- the filter table ------------------------------------------------------------------- */

static jv f_default(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv def = jarg(A, 0, "default_value", jj_cstr(I, ""));
    bool boolean = arg_bool(I, A, 1, "boolean", false);
    return v.k == JK_UNDEF || (boolean && !jj_truthy(I, v)) ? def : v;
}

static jv f_length(jinterp *I, jv v, const jargs *A, jframe *f) { return jj_int(jj_len(I, v)); }
static jv f_string(jinterp *I, jv v, const jargs *A, jframe *f) { return jj_to_str(I, v); }

static jv f_safe(jinterp *I, jv v, const jargs *A, jframe *f)
{
    v = need_str(I, v, "safe");
    v.safe = 1;
    return v;
}

/* soft_str(v).method(): Markup stays Markup */
static jv keep_markup(jv v, jv r)
{
    r.safe = v.safe;
    return r;
}

static jv f_trim(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv s = need_str(I, v, "trim");
    return keep_markup(s, jj_str_strip(I, s, jarg(A, 0, "chars", jj_none()), true, true));
}

static jv f_upper(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv s = need_str(I, v, "upper");
    return keep_markup(s, jj_str_case(I, s, 1));
}

static jv f_lower(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv s = need_str(I, v, "lower");
    return keep_markup(s, jj_str_case(I, s, 0));
}

static jv f_capitalize(jinterp *I, jv v, const jargs *A, jframe *f)
{
    return jj_str_case(I, need_str(I, v, "capitalize"), 2);
}

static jv f_replace(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv c = jarg(A, 2, "count", jj_none());
    return jj_str_replace(I, need_str(I, v, "replace"), jarg(A, 0, "old", jj_cstr(I, "")),
                        jarg(A, 1, "new", jj_cstr(I, "")), c.k == JK_INT ? c.u.i : -1);
}

static jv f_escape(jinterp *I, jv v, const jargs *A, jframe *f) { return jj_html_escape(I, v, false); }
static jv f_forceescape(jinterp *I, jv v, const jargs *A, jframe *f) { return jj_html_escape(I, v, true); }

static jv f_abs(jinterp *I, jv v, const jargs *A, jframe *f)
{
    if (v.k == JK_UNDEF)
        jj_fail(I, SP_ERR_TEMPLATE, "'%s' is undefined", v.u.undef ? v.u.undef : "value");
    if (v.k == JK_INT)
        return jj_int(v.u.i < 0 ? jj_int_neg(I, v.u.i, "abs") : v.u.i);
    if (v.k == JK_FLOAT)
        return jj_float(fabs(v.u.f));
    if (v.k == JK_BOOL)
        return jj_int(v.u.b);
    jj_fail(I, SP_ERR_TEMPLATE, "bad operand type for abs(): '%s'", jj_type_name(v));
}

static jv f_list(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jlist *src = need_iter(I, v, "list");
    jv out = jj_list(I, src->n, 0);
    for (size_t i = 0; i < src->n; i++)
        jj_list_push(I, out.u.l, src->v[i]);
    return out;
}

static jv f_first(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jlist *src = need_iter(I, v, "first");
    return src->n ? src->v[0] : jj_undef("No first item, sequence was empty.");
}

static jv f_last(jinterp *I, jv v, const jargs *A, jframe *f)
{
    if (v.k == JK_LIST && (v.u.l->flags & JL_GEN))
        jj_fail(I, SP_ERR_TEMPLATE, "'generator' object is not reversible");
    jlist *src = need_iter(I, v, "last");
    return src->n ? src->v[src->n - 1] : jj_undef("No last item, sequence was empty.");
}

static jv f_min(jinterp *I, jv v, const jargs *A, jframe *f) { return f_minmax(I, v, A, false); }
static jv f_max(jinterp *I, jv v, const jargs *A, jframe *f) { return f_minmax(I, v, A, true); }
static jv f_select_(jinterp *I, jv v, const jargs *A, jframe *f) { return f_select(I, v, A, true, false, f); }
static jv f_reject(jinterp *I, jv v, const jargs *A, jframe *f) { return f_select(I, v, A, false, false, f); }
static jv f_selectattr(jinterp *I, jv v, const jargs *A, jframe *f) { return f_select(I, v, A, true, true, f); }
static jv f_rejectattr(jinterp *I, jv v, const jargs *A, jframe *f) { return f_select(I, v, A, false, true, f); }

static jv f_attr(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jv nm = jarg(A, 0, "name", jj_none());
    if (nm.k != JK_STR)
        jj_fail(I, SP_ERR_TEMPLATE, "attr: the name must be a string");
    if (v.k == JK_DICT || v.k == JK_STR || v.k == JK_LIST) { /* attributes only: no item lookup */
        bool found;
        jv m = jj_method_get(I, v, nm.u.s->s, &found);
        return found ? m : jj_undef(nm.u.s->s);
    }
    return jj_getattr(I, v, nm.u.s->s);
}

static jv f_format(jinterp *I, jv v, const jargs *A, jframe *f)
{
    if (A->nk) {
        jv d = jj_dict(I, A->nk);
        for (size_t k = 0; k < A->nk; k++)
            jj_dict_set(I, d.u.d, jj_cstr(I, A->kn[k]), A->kv[k]);
        return jj_format_percent(I, need_str(I, v, "format"), d);
    }
    jv t = jj_list(I, A->n, JL_TUPLE);
    for (size_t i = 0; i < A->n; i++)
        jj_list_push(I, t.u.l, A->a[i]);
    return jj_format_percent(I, need_str(I, v, "format"), t);
}

static jv f_pprint(jinterp *I, jv v, const jargs *A, jframe *f)
{
    jbuf b = {0};
    jj_write_repr(I, &b, v);
    return jj_str(I, b.p ? b.p : "", b.n);
}

typedef jv (*jfilter_fn)(jinterp *I, jv v, const jargs *A, jframe *f);

/* Every filter specula implements, by name (Jinja2's builtin filters less the ones that
 * need Python objects: filesizeformat, random, striptags, wordwrap, urlize). */
static const struct {
    const char *name;
    jfilter_fn fn;
} FILTERS[] = {
    {"abs", f_abs},           {"attr", f_attr},           {"batch", f_batch},
    {"capitalize", f_capitalize}, {"center", f_center},   {"count", f_length},
    {"d", f_default},         {"default", f_default},     {"dictsort", f_dictsort},
    {"e", f_escape},          {"escape", f_escape},       {"first", f_first},
    {"float", f_float},       {"forceescape", f_forceescape}, {"format", f_format},
    {"groupby", f_groupby},   {"indent", f_indent},       {"int", f_int},
    {"items", f_items},       {"join", f_join},           {"last", f_last},
    {"length", f_length},     {"list", f_list},           {"lower", f_lower},
    {"map", f_map},           {"max", f_max},             {"min", f_min},
    {"pprint", f_pprint},     {"reject", f_reject},       {"rejectattr", f_rejectattr},
    {"replace", f_replace},   {"reverse", f_reverse},     {"round", f_round},
    {"safe", f_safe},         {"select", f_select_},      {"selectattr", f_selectattr},
    {"slice", f_slice},       {"sort", f_sort},           {"string", f_string},
    {"sum", f_sum},           {"title", f_title},         {"tojson", f_tojson},
    {"trim", f_trim},         {"truncate", f_truncate},   {"unique", f_unique},
    {"upper", f_upper},       {"urlencode", f_urlencode}, {"wordcount", f_wordcount},
    {"xmlattr", f_xmlattr},
};

static jfilter_fn find_filter(const char *name)
{
    for (size_t i = 0; i < sizeof FILTERS / sizeof FILTERS[0]; i++)
        if (!strcmp(FILTERS[i].name, name))
            return FILTERS[i].fn;
    return NULL;
}

bool jj_filter_exists(const char *name)
{
    return find_filter(name) != NULL;
}

jv jj_filter_apply(jinterp *I, const char *name, jv v, jv *args, size_t n_args,
                 const char **kw_names, jv *kw_vals, size_t n_kw, jframe *f)
{
    jargs A = {args, n_args, kw_names, kw_vals, n_kw};
    jj_tick(I);
    jfilter_fn fn = find_filter(name);
    if (!fn)
        jj_fail(I, SP_ERR_TEMPLATE, "No filter named '%s'.", name);
    return fn(I, v, &A, f);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static bool str_all_case(jinterp *I, jv v, bool upper)
{
    if (v.k != JK_STR)
        return false;
    jv other = jj_str_case(I, v, upper ? 0 : 1), same = jj_str_case(I, v, upper ? 1 : 0);
    /* Python islower/isupper: at least one cased character and no opposite-case ones */
    return jj_equal(I, v, same) && !jj_equal(I, v, other);
}

/* ---- the test table ------------------------------------------------------------------- */

typedef bool (*jtest_fn)(jinterp *I, jv v, jv arg);

static bool t_defined(jinterp *I, jv v, jv a) { return v.k != JK_UNDEF; }
static bool t_undefined(jinterp *I, jv v, jv a) { return v.k == JK_UNDEF; }
static bool t_none(jinterp *I, jv v, jv a) { return v.k == JK_NONE; }
static bool t_boolean(jinterp *I, jv v, jv a) { return v.k == JK_BOOL; }
static bool t_false(jinterp *I, jv v, jv a) { return v.k == JK_BOOL && !v.u.b; }
static bool t_true(jinterp *I, jv v, jv a) { return v.k == JK_BOOL && v.u.b; }
static bool t_integer(jinterp *I, jv v, jv a) { return v.k == JK_INT; }
static bool t_float(jinterp *I, jv v, jv a) { return v.k == JK_FLOAT; }
static bool t_number(jinterp *I, jv v, jv a) { return jj_is_num(v); }
static bool t_string(jinterp *I, jv v, jv a) { return v.k == JK_STR; }
static bool t_mapping(jinterp *I, jv v, jv a) { return v.k == JK_DICT; }
static bool t_escaped(jinterp *I, jv v, jv a) { return false; }

static bool t_iterable(jinterp *I, jv v, jv a)
{
    return v.k == JK_UNDEF || v.k == JK_STR || v.k == JK_LIST || v.k == JK_DICT || v.k == JK_VIEW;
}

static bool t_sequence(jinterp *I, jv v, jv a)
{
    return v.k == JK_UNDEF || v.k == JK_STR || (v.k == JK_LIST && !(v.u.l->flags & JL_GEN)) ||
           v.k == JK_DICT;
}

static bool t_callable(jinterp *I, jv v, jv a)
{
    return v.k == JK_FUNC || v.k == JK_MACRO || v.k == JK_CYCLER || v.k == JK_JOINER;
}

static bool t_filter(jinterp *I, jv v, jv a) { return v.k == JK_STR && jj_filter_exists(v.u.s->s); }
static bool t_test(jinterp *I, jv v, jv a) { return v.k == JK_STR && jj_test_exists(v.u.s->s); }

static bool t_sameas(jinterp *I, jv v, jv a)
{
    if (v.k != a.k)
        return false;
    if (v.k == JK_NONE || v.k == JK_UNDEF)
        return true;
    if (v.k == JK_BOOL)
        return v.u.b == a.u.b;
    if (v.k == JK_INT)
        return v.u.i == a.u.i && v.u.i >= -5 && v.u.i <= 256; /* CPython small ints */
    return v.u.d == a.u.d;
}

static bool t_in(jinterp *I, jv v, jv a) { return jj_contains(I, v, a); }
static bool t_eq(jinterp *I, jv v, jv a) { return jj_equal(I, v, a); }
static bool t_ne(jinterp *I, jv v, jv a) { return !jj_equal(I, v, a); }
static bool t_lt(jinterp *I, jv v, jv a) { return jj_compare(I, v, a) < 0; }
static bool t_le(jinterp *I, jv v, jv a) { return jj_compare(I, v, a) <= 0; }
static bool t_gt(jinterp *I, jv v, jv a) { return jj_compare(I, v, a) > 0; }
static bool t_ge(jinterp *I, jv v, jv a) { return jj_compare(I, v, a) >= 0; }

static bool t_divisibleby(jinterp *I, jv v, jv a)
{
    if (!jj_is_num(v) || !jj_is_num(a))
        jj_fail(I, SP_ERR_TEMPLATE, "divisibleby needs numbers");
    return jj_num(jj_binop(I, OP_MOD, v, a)) == 0;
}

static int64_t need_int(jinterp *I, jv v, const char *name)
{
    if (v.k != JK_INT && v.k != JK_BOOL)
        jj_fail(I, SP_ERR_TEMPLATE, "%s needs an integer", name);
    return v.k == JK_INT ? v.u.i : v.u.b;
}

static bool t_even(jinterp *I, jv v, jv a) { return need_int(I, v, "even") % 2 == 0; }
static bool t_odd(jinterp *I, jv v, jv a) { return need_int(I, v, "odd") % 2 != 0; }
static bool t_lower(jinterp *I, jv v, jv a) { return str_all_case(I, v, false); }
static bool t_upper(jinterp *I, jv v, jv a) { return str_all_case(I, v, true); }

static const struct {
    const char *name;
    jtest_fn fn;
} TESTS[] = {
    {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},
    {"boolean", t_boolean},   {"false", t_false},         {"true", t_true},
    {"integer", t_integer},   {"float", t_float},         {"number", t_number},
    {"string", t_string},     {"mapping", t_mapping},     {"iterable", t_iterable},
    {"sequence", t_sequence}, {"callable", t_callable},   {"sameas", t_sameas},
    {"escaped", t_escaped},   {"in", t_in},               {"eq", t_eq},
    {"equalto", t_eq},        {"==", t_eq},               {"ne", t_ne},
    {"!=", t_ne},             {"lt", t_lt},               {"lessthan", t_lt},
    {"<", t_lt},              {"le", t_le},               {"<=", t_le},
    {"gt", t_gt},             {"greaterthan", t_gt},      {">", t_gt},
    {"ge", t_ge},             {">=", t_ge},               {"divisibleby", t_divisibleby},
    {"even", t_even},         {"odd", t_odd},             {"lower", t_lower},
    {"upper", t_upper},       {"filter", t_filter},       {"test", t_test},
};

static jtest_fn find_test(const char *name)
{
    for (size_t i = 0; i < sizeof TESTS / sizeof TESTS[0]; i++)
        if (!strcmp(TESTS[i].name, name))
            return TESTS[i].fn;
    return NULL;
}

bool jj_test_exists(const char *name)
{
    return find_test(name) != NULL;
}

bool jj_test_apply(jinterp *I, const char *name, jv v, jv *args, size_t n_args, jframe *f)
{
    jtest_fn fn = find_test(name);
    if (!fn)
        jj_fail(I, SP_ERR_TEMPLATE, "No test named '%s'.", name);
    return fn(I, v, n_args ? args[0] : jj_undef("missing test argument"));
}
