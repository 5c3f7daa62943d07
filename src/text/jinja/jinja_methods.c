/* jinja_methods.c: what templates call on values and globally, with Python semantics:
 * method lookup and calls (str methods live in jinja_str.c), dict methods (items, keys,
 * values, get), non-mutating list methods (mutating ones are refused, as
 * ImmutableSandboxedEnvironment does), and the globals range / namespace / dict /
 * raise_exception / strftime_now / cycler / joiner. */
#include "text/jinja/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- method lookup and calls ---------------------------------------------------------------- */

static const char *const STR_METHODS[] = {
    "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "replace", "upper",
    "lower", "title", "capitalize", "swapcase", "casefold", "find", "rfind", "index", "rindex",
    "count", "join", "format", "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum",
    "isspace", "islower", "isupper", "istitle", "zfill", "ljust", "rjust", "center", "partition",
    "rpartition", "splitlines", "removeprefix", "removesuffix", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const DICT_UNSAFE[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const LIST_METHODS[] = {"index", "count", "copy", NULL};
static const char *const TUPLE_METHODS[] = {"index", "count", NULL};
static const char *const LIST_UNSAFE[] = {"append", "extend", "insert", "pop", "remove", "reverse",
                                          "sort", "clear", NULL};

static bool in_list(const char *const *l, const char *s)
{
    for (; *l; l++)
        if (!strcmp(*l, s))
            return true;
    return false;
}

jv jj_method_get(jinterp *I, jv self, const char *name, bool *found)
{
    *found = false;
    const char *const *ok = NULL, *const *unsafe = NULL;
    if (self.k == JK_STR)
        ok = STR_METHODS;
    else if (self.k == JK_DICT)
        ok = DICT_METHODS, unsafe = DICT_UNSAFE;
    else if (self.k == JK_LIST && !(self.u.l->flags & JL_GEN))
        ok = (self.u.l->flags & JL_TUPLE) ? TUPLE_METHODS : LIST_METHODS,
        unsafe = (self.u.l->flags & JL_TUPLE) ? NULL : LIST_UNSAFE;
    else if (self.k == JK_CYCLER) {
        if (!strcmp(name, "current")) {
            *found = true;
            return self.u.l->v[self.u.l->v[0].u.i + 1];
        }
        if (strcmp(name, "next") && strcmp(name, "reset"))
            return jj_undef(name);
        *found = true;
        struct jfunc *fn = jj_alloc(I, sizeof *fn);
        fn->id = !strcmp(name, "next") ? F_CYCLER_NEXT : F_CYCLER_RESET;
        fn->name = name;
        fn->self = self;
        jv v = {.k = JK_FUNC, .u = {.fn = fn}};
        return v;
    }
    if (unsafe && in_list(unsafe, name))
        jj_fail(I, SP_ERR_TEMPLATE, "access to attribute '%s' of '%s' object is unsafe.", name,
              jj_type_name(self));
    if (!ok || !in_list(ok, name))
        return jj_undef(name);
    *found = true;
    struct jfunc *fn = jj_alloc(I, sizeof *fn);
    fn->id = F_METHOD;
    fn->name = name;
    fn->self = self;
    jv v = {.k = JK_FUNC, .u = {.fn = fn}};
    return v;
}

static jv view(jinterp *I, jv d, int which)
{
    jdict *v = jj_alloc(I, sizeof *v);
    *v = *d.u.d;
    v->which = which;
    jv out = {.k = JK_VIEW, .u = {.d = v}};
    return out;
}

static jv dict_method(jinterp *I, jv self, const char *m, const jargs *A)
{
    jj_no_kwargs(I, A, m);
    if (!strcmp(m, "items"))
        return view(I, self, 2);
    if (!strcmp(m, "keys"))
        return view(I, self, 0);
    if (!strcmp(m, "values"))
        return view(I, self, 1);
    if (!strcmp(m, "copy")) {
        jv c = jj_dict(I, self.u.d->n);
        for (size_t i = 0; i < self.u.d->n; i++)
            jj_dict_set(I, c.u.d, self.u.d->keys[i], self.u.d->vals[i]);
        return c;
    }
    /* get */
    if (A->n < 1 || A->n > 2)
        jj_fail(I, SP_ERR_TEMPLATE, "get expected 1 or 2 arguments, got %zu", A->n);
    jv *v = jj_dict_get(I, self.u.d, A->a[0]);
    return v ? *v : (A->n > 1 ? A->a[1] : jj_none());
}

static jv list_method(jinterp *I, jv self, const char *m, const jargs *A)
{
    jj_no_kwargs(I, A, m);
    jlist *l = self.u.l;
    if (!strcmp(m, "copy")) {
        jv c = jj_list(I, l->n, 0);
        for (size_t i = 0; i < l->n; i++)
            jj_list_push(I, c.u.l, l->v[i]);
        return c;
    }
    if (A->n < 1)
        jj_fail(I, SP_ERR_TEMPLATE, "%s() takes exactly one argument", m);
    int64_t count = 0;
    for (size_t i = 0; i < l->n; i++)
        if (jj_equal(I, l->v[i], A->a[0])) {
            if (!strcmp(m, "index"))
                return jj_int((int64_t)i);
            count++;
        }
    if (!strcmp(m, "index"))
        jj_fail(I, SP_ERR_TEMPLATE, "ValueError: value is not in list");
    return jj_int(count);
}

/* markupsafe.Markup wraps these str methods: on a Markup string they return Markup. */
static bool markup_keeps(const char *m)
{
    static const char *const kept[] = {"capitalize", "title", "lower", "upper", "replace",
                                       "ljust", "rjust", "lstrip", "rstrip", "center", "strip",
                                       "expandtabs", "swapcase", "zfill", "format"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        if (!strcmp(m, kept[i]))
            return true;
    return false;
}

jv jj_method_call(jinterp *I, jv self, const char *name, jv *args, size_t n_args,
                const char **kw_names, jv *kw_vals, size_t n_kw)
{
    jargs A = {args, n_args, kw_names, kw_vals, n_kw};
    if (self.k == JK_STR) {
        jv r = jj_str_method(I, self, name, &A);
        if (self.safe && r.k == JK_STR && markup_keeps(name))
            r.safe = 1;
        return r;
    }
    if (self.k == JK_DICT)
        return dict_method(I, self, name, &A);
    if (self.k == JK_LIST)
        return list_method(I, self, name, &A);
    jj_fail(I, SP_ERR_TEMPLATE, "'%s' object has no method '%s'", jj_type_name(self), name);
}

/* ---- globals ------------------------------------------------------------------------------- */

static struct jfunc GLOBAL_FNS[] = {
    {.id = F_RANGE, .name = "range"},         {.id = F_NAMESPACE, .name = "namespace"},
    {.id = F_DICT, .name = "dict"},           {.id = F_RAISE, .name = "raise_exception"},
    {.id = F_STRFTIME, .name = "strftime_now"}, {.id = F_CYCLER, .name = "cycler"},
    {.id = F_JOINER, .name = "joiner"},
};

jv jj_global(const char *name, bool *found)
{
    for (size_t i = 0; i < sizeof GLOBAL_FNS / sizeof GLOBAL_FNS[0]; i++)
        if (!strcmp(GLOBAL_FNS[i].name, name)) {
            *found = true;
            jv v = {.k = JK_FUNC, .u = {.fn = &GLOBAL_FNS[i]}};
            return v;
        }
    *found = false;
    return jj_undef(name);
}

static int64_t int_arg(jinterp *I, jv v, const char *what)
{
    if (v.k == JK_INT)
        return v.u.i;
    if (v.k == JK_BOOL)
        return v.u.b;
    jj_fail(I, SP_ERR_TEMPLATE, "%s: '%s' object cannot be interpreted as an integer", what,
          jj_type_name(v));
}

static jv g_range(jinterp *I, jv *a, size_t n)
{
    if (n < 1 || n > 3)
        jj_fail(I, SP_ERR_TEMPLATE, "range expected 1 to 3 arguments, got %zu", n);
    int64_t start = 0, stop, step = 1;
    if (n == 1)
        stop = int_arg(I, a[0], "range");
    else {
        start = int_arg(I, a[0], "range");
        stop = int_arg(I, a[1], "range");
        if (n == 3)
            step = int_arg(I, a[2], "range");
    }
    if (step == 0)
        jj_fail(I, SP_ERR_TEMPLATE, "range() arg 3 must not be zero");
    /* spans and steps as uint64: range(-2**63, 2**63-1) must not overflow */
    uint64_t span = step > 0 ? (stop > start ? (uint64_t)stop - (uint64_t)start : 0)
                             : (start > stop ? (uint64_t)start - (uint64_t)stop : 0);
    uint64_t ast = step > 0 ? (uint64_t)step : (uint64_t)0 - (uint64_t)step;
    uint64_t count = span / ast + (span % ast != 0);
    if (count > JINJA_MAX_RANGE)
        jj_fail(I, SP_ERR_LIMIT, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
              JINJA_MAX_RANGE);
    jv out = jj_list(I, (size_t)count, 0);
    for (int64_t i = 0; i < (int64_t)count; i++)
        /* the value lies within [start, stop), but i * step alone may not fit (range with a
         * step of 2**62): computed modulo 2^64, which gives the in-range value */
        jj_list_push(I, out.u.l, jj_int((int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)step)));
    return out;
}

static jv g_strftime(jinterp *I, jv *a, size_t n)
{
    if (n != 1 || a[0].k != JK_STR)
        jj_fail(I, SP_ERR_TEMPLATE, "strftime_now(format) needs one string");
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *now = I->opt ? I->opt->now : NULL;
    if (now) {
        int y, mo, d, h = 0, mi = 0, s = 0;
        if (sscanf(now, "%d-%d-%dT%d:%d:%d", &y, &mo, &d, &h, &mi, &s) < 3 &&
            sscanf(now, "%d-%d-%d %d:%d:%d", &y, &mo, &d, &h, &mi, &s) < 3)
            jj_fail(I, SP_ERR_INVALID_ARG, "--now '%s' is not an ISO 8601 date-time", now);
        tm.tm_year = y - 1900;
        tm.tm_mon = mo - 1;
        tm.tm_mday = d;
        tm.tm_hour = h;
        tm.tm_min = mi;
        tm.tm_sec = s;
        tm.tm_isdst = -1;
        time_t t = timegm(&tm);
        gmtime_r(&t, &tm); /* fills weekday and day of year */
    } else {
        time_t t = time(NULL);
        localtime_r(&t, &tm);
    }
    char out[512];
    size_t len = strftime(out, sizeof out, a[0].u.s->s, &tm);
    if (!len && a[0].u.s->len)
        out[0] = '\0';
    return jj_cstr(I, out);
}

static jv g_namespace(jinterp *I, jv *a, size_t n, const char **kn, jv *kv, size_t nk)
{
    jv ns = jj_dict(I, nk);
    ns.k = JK_NS;
    for (size_t i = 0; i < n; i++) {
        if (a[i].k != JK_DICT)
            jj_fail(I, SP_ERR_TEMPLATE, "namespace() positional arguments must be mappings");
        for (size_t k = 0; k < a[i].u.d->n; k++)
            jj_dict_set(I, ns.u.d, a[i].u.d->keys[k], a[i].u.d->vals[k]);
    }
    for (size_t k = 0; k < nk; k++)
        jj_dict_set(I, ns.u.d, jj_cstr(I, kn[k]), kv[k]);
    return ns;
}

jv jj_global_call(jinterp *I, jfid id, jv *args, size_t n_args, const char **kw_names,
                jv *kw_vals, size_t n_kw)
{
    switch (id) {
    case F_RANGE: return g_range(I, args, n_args);
    case F_NAMESPACE: return g_namespace(I, args, n_args, kw_names, kw_vals, n_kw);
    case F_DICT: {
        jv d = g_namespace(I, args, n_args, kw_names, kw_vals, n_kw);
        d.k = JK_DICT;
        return d;
    }
    case F_RAISE: {
        jbuf b = {0};
        if (n_args)
            jj_write_str(I, &b, args[0]);
        jj_fail(I, SP_ERR_TEMPLATE, "%s", b.p ? b.p : "");
    }
    case F_STRFTIME: return g_strftime(I, args, n_args);
    case F_CYCLER: {
        if (!n_args)
            jj_fail(I, SP_ERR_TEMPLATE, "at least one item has to be provided");
        jv c = jj_list(I, n_args + 1, 0);
        jj_list_push(I, c.u.l, jj_int(0));
        for (size_t i = 0; i < n_args; i++)
            jj_list_push(I, c.u.l, args[i]);
        c.k = JK_CYCLER;
        return c;
    }
    case F_CYCLER_NEXT: {
        jlist *c = args[0].u.l;
        int64_t pos = c->v[0].u.i;
        jv v = c->v[pos + 1];
        c->v[0].u.i = (pos + 1) % (int64_t)(c->n - 1);
        return v;
    }
    case F_CYCLER_RESET:
        args[0].u.l->v[0].u.i = 0;
        return jj_none();
    case F_JOINER: {
        jv sep = n_args ? args[0] : jj_cstr(I, ", ");
        for (size_t k = 0; k < n_kw; k++)
            if (!strcmp(kw_names[k], "sep"))
                sep = kw_vals[k];
        jv j = jj_list(I, 2, 0);
        jj_list_push(I, j.u.l, jj_bool(false));
        jj_list_push(I, j.u.l, sep);
        j.k = JK_JOINER;
        return j;
    }
    case F_JOINER_CALL: {
        jlist *j = args[0].u.l;
        if (!j->v[0].u.b) {
            j->v[0].u.b = true;
            return jj_cstr(I, "");
        }
        return j->v[1];
    }
    default: break;
    }
    jj_fail(I, SP_ERR_TEMPLATE, "this function cannot be called");
}
