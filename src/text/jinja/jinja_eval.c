/* jinja_eval.c: the interpreter: statements, expressions, scopes, loops, macros, calls,
 * and the compile/render entry points.
 *
 * Scoping as Jinja2: a for loop gives every iteration a fresh frame (assignments inside do
 * not leak, and a read before an assignment sees the outer value); if/else opens no frame;
 * a macro call's frame sits on the frame the macro was defined in, so top-level macros see
 * the template's variables as they are when called. Namespace attributes are the way out
 * of a loop. */
#include "text/jinja/jinja_internal.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jv jj_eval(jinterp *I, const jnode *n, jframe *f);
static void jj_exec(jinterp *I, const jnode *n, jframe *f);
static jv jj_lookup(jinterp *I, jframe *f, const char *name);
/* Calls a callable with evaluated arguments. */
static jv jj_call(jinterp *I, jv fn, jv *args, size_t n_args, const char **kw_names, jv *kw_vals,
                  size_t n_kw);
/* Renders a body into a fresh string. */
static jv jj_capture(jinterp *I, const jnode *body, jframe *f);

static jframe *new_frame(jinterp *I, jframe *parent)
{
    jframe *f = jj_alloc(I, sizeof *f);
    memset(f, 0, sizeof *f);
    f->parent = parent;
    return f;
}

static void set_var(jinterp *I, jframe *f, const char *name, jv v)
{
    jj_dict_set(I, &f->vars, jj_cstr(I, name), v);
}

static jv jj_lookup(jinterp *I, jframe *f, const char *name)
{
    size_t len = strlen(name);
    for (; f; f = f->parent) {
        jv *v = jj_dict_get_str(&f->vars, name, len);
        if (v)
            return *v;
    }
    bool found;
    jv g = jj_global(name, &found);
    (void)I;
    return found ? g : jj_undef(name);
}

_Noreturn static void undefined_error(jinterp *I, jv u)
{
    if (u.u.undef)
        jj_fail(I, SP_ERR_TEMPLATE, "'%s' is undefined", u.u.undef);
    jj_fail(I, SP_ERR_TEMPLATE, "undefined value used");
}

/* ---- attribute and item access ---------------------------------------------------------- */

static jv loop_attr(jinterp *I, const jloop *L, const char *name)
{
    if (!strcmp(name, "index"))
        return jj_int(L->index0 + 1);
    if (!strcmp(name, "index0"))
        return jj_int(L->index0);
    if (!strcmp(name, "revindex"))
        return jj_int(L->length - L->index0);
    if (!strcmp(name, "revindex0"))
        return jj_int(L->length - L->index0 - 1);
    if (!strcmp(name, "first"))
        return jj_bool(L->index0 == 0);
    if (!strcmp(name, "last"))
        return jj_bool(L->index0 == L->length - 1);
    if (!strcmp(name, "length"))
        return jj_int(L->length);
    if (!strcmp(name, "depth"))
        return jj_int(L->depth0 + 1);
    if (!strcmp(name, "depth0"))
        return jj_int(L->depth0);
    if (!strcmp(name, "previtem"))
        return L->index0 > 0 ? L->items->v[L->index0 - 1] : jj_undef("there is no previous item");
    if (!strcmp(name, "nextitem"))
        return L->index0 + 1 < L->length ? L->items->v[L->index0 + 1] : jj_undef("there is no next item");
    if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        struct jfunc *fn = jj_alloc(I, sizeof *fn);
        fn->id = F_LOOP_CYCLE;
        fn->name = name;
        fn->self.k = JK_LOOP;
        fn->self.u.loop = (jloop *)L;
        jv v = {.k = JK_FUNC, .u = {.fn = fn}};
        return v;
    }
    return jj_undef(name);
}

jv jj_getattr(jinterp *I, jv obj, const char *name)
{
    bool found;
    switch ((jk)obj.k) {
    case JK_UNDEF: undefined_error(I, obj);
    case JK_DICT: {
        jv m = jj_method_get(I, obj, name, &found);
        if (found)
            return m;
        jv *v = jj_dict_get_str(obj.u.d, name, strlen(name));
        return v ? *v : jj_undef(name);
    }
    case JK_NS: {
        jv *v = jj_dict_get_str(obj.u.d, name, strlen(name));
        return v ? *v : jj_undef(name);
    }
    case JK_LOOP: return loop_attr(I, obj.u.loop, name);
    case JK_STR:
    case JK_LIST:
    case JK_CYCLER: {
        if (obj.k == JK_LIST && (obj.u.l->flags & JL_GROUP) && obj.u.l->n == 2 &&
            (!strcmp(name, "grouper") || !strcmp(name, "list")))
            return obj.u.l->v[name[0] == 'l'];
        jv m = jj_method_get(I, obj, name, &found);
        return found ? m : jj_undef(name);
    }
    default: return jj_undef(name);
    }
}

static int64_t norm_index(int64_t i, int64_t n)
{
    return i < 0 ? i + n : i;
}

jv jj_getitem(jinterp *I, jv obj, jv key)
{
    switch ((jk)obj.k) {
    case JK_UNDEF: undefined_error(I, obj);
    case JK_DICT:
    case JK_NS: {
        jv *v = jj_dict_get(I, obj.u.d, key);
        if (v)
            return *v;
        break;
    }
    case JK_LIST:
        if ((key.k == JK_INT || key.k == JK_BOOL) && !(obj.u.l->flags & JL_GEN)) {
            int64_t n = (int64_t)obj.u.l->n, i = norm_index(key.k == JK_INT ? key.u.i : key.u.b, n);
            return i >= 0 && i < n ? obj.u.l->v[i] : jj_undef("list index out of range");
        }
        break;
    case JK_STR:
        if (key.k == JK_INT || key.k == JK_BOOL) {
            jlist *chars;
            bool ok;
            chars = jj_iterate(I, obj, &ok);
            int64_t n = (int64_t)chars->n, i = norm_index(key.k == JK_INT ? key.u.i : key.u.b, n);
            return i >= 0 && i < n ? chars->v[i] : jj_undef("string index out of range");
        }
        break;
    case JK_LOOP:
        if (key.k == JK_STR)
            return loop_attr(I, obj.u.loop, key.u.s->s);
        break;
    default: break;
    }
    if (key.k == JK_STR)
        return jj_getattr(I, obj, key.u.s->s);
    return jj_undef("item");
}

/* Python slicing of strings, lists and tuples. */
static jv do_slice(jinterp *I, jv obj, jv start, jv stop, jv step)
{
    if (obj.k == JK_UNDEF)
        undefined_error(I, obj);
    bool is_str = obj.k == JK_STR;
    if (!is_str && !(obj.k == JK_LIST && !(obj.u.l->flags & JL_GEN)))
        jj_fail(I, SP_ERR_TEMPLATE, "'%s' object is not subscriptable", jj_type_name(obj));
    bool ok;
    jlist *src = is_str ? jj_iterate(I, obj, &ok) : obj.u.l;
    int64_t n = (int64_t)src->n;
    int64_t st = 1;
    if (step.k != JK_NONE && step.k != JK_UNDEF) {
        if (step.k != JK_INT)
            jj_fail(I, SP_ERR_TEMPLATE, "slice indices must be integers");
        st = step.u.i;
        if (st == 0)
            jj_fail(I, SP_ERR_TEMPLATE, "slice step cannot be zero");
    }
    int64_t lo, hi;
    bool has_lo = start.k == JK_INT, has_hi = stop.k == JK_INT;
    if ((start.k != JK_NONE && start.k != JK_UNDEF && !has_lo) ||
        (stop.k != JK_NONE && stop.k != JK_UNDEF && !has_hi))
        jj_fail(I, SP_ERR_TEMPLATE, "slice indices must be integers or None");
    if (st > 0) {
        lo = has_lo ? norm_index(start.u.i, n) : 0;
        hi = has_hi ? norm_index(stop.u.i, n) : n;
        lo = lo < 0 ? 0 : lo > n ? n : lo;
        hi = hi < 0 ? 0 : hi > n ? n : hi;
    } else {
        lo = has_lo ? norm_index(start.u.i, n) : n - 1;
        hi = has_hi ? norm_index(stop.u.i, n) : -1;
        lo = lo < -1 ? -1 : lo > n - 1 ? n - 1 : lo;
        hi = hi < -1 ? -1 : hi > n - 1 ? n - 1 : hi;
    }
    jv out = jj_list(I, 0, is_str ? 0 : (obj.u.l->flags & JL_TUPLE));
    /* lo and hi lie in [-1, n]: count the items first, so a huge step cannot overflow i */
    uint64_t span = st > 0 ? (hi > lo ? (uint64_t)(hi - lo) : 0) : (lo > hi ? (uint64_t)(lo - hi) : 0);
    uint64_t ast = st > 0 ? (uint64_t)st : (uint64_t)0 - (uint64_t)st;
    uint64_t count = span / ast + (span % ast != 0);
    for (uint64_t k = 0; k < count; k++)
        jj_list_push(I, out.u.l, src->v[st > 0 ? lo + (int64_t)(k * ast) : lo - (int64_t)(k * ast)]);
    if (!is_str)
        return out;
    jbuf b = {0};
    for (size_t i = 0; i < out.u.l->n; i++)
        jj_buf_put(I, &b, out.u.l->v[i].u.s->s, out.u.l->v[i].u.s->len);
    return jj_str(I, b.p ? b.p : "", b.n);
}

/* ---- arithmetic ------------------------------------------------------------------------- */

static jv repeat(jinterp *I, jv seq, int64_t times)
{
    if (times < 0)
        times = 0;
    if (seq.k == JK_STR) {
        if (seq.u.s->len && (uint64_t)times > JINJA_MAX_STRING / seq.u.s->len)
            jj_fail(I, SP_ERR_LIMIT, "template built a string over %u MB", JINJA_MAX_STRING >> 20);
        jbuf b = {0};
        for (int64_t i = 0; i < times; i++)
            jj_buf_put(I, &b, seq.u.s->s, seq.u.s->len);
        return jj_str(I, b.p ? b.p : "", b.n);
    }
    uint64_t total;
    if (__builtin_mul_overflow((uint64_t)times, (uint64_t)seq.u.l->n + 1, &total) || total > 10000000u)
        jj_fail(I, SP_ERR_LIMIT, "template built a list that is too long");
    jv out = jj_list(I, 0, seq.u.l->flags & JL_TUPLE);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++)
            jj_list_push(I, out.u.l, seq.u.l->v[k]);
    return out;
}

static const char *op_symbol(int op)
{
    static const char *const s[] = {"+", "-", "*", "/", "//", "%", "**"};
    return op >= 0 && op <= OP_POW ? s[op] : "?";
}

static int64_t ipow(jinterp *I, int64_t b, int64_t e)
{
    int64_t r = 1;
    while (e > 0) {
        if (e & 1)
            r = jj_int_mul(I, r, b, "**");
        e >>= 1;
        if (e)
            b = jj_int_mul(I, b, b, "**");
    }
    return r;
}

static jv num_binop(jinterp *I, int op, jv a, jv b)
{
    bool flt = a.k == JK_FLOAT || b.k == JK_FLOAT;
    if (!flt && op != OP_DIV) {
        int64_t x = a.k == JK_INT ? a.u.i : a.u.b, y = b.k == JK_INT ? b.u.i : b.u.b;
        switch (op) {
        case OP_ADD: return jj_int(jj_int_add(I, x, y, "+"));
        case OP_SUB: return jj_int(jj_int_sub(I, x, y, "-"));
        case OP_MUL: return jj_int(jj_int_mul(I, x, y, "*"));
        case OP_FLOORDIV:
        case OP_MOD: {
            if (y == 0)
                jj_fail(I, SP_ERR_TEMPLATE, "integer division or modulo by zero");
            if (y == -1) /* x / -1 traps for INT64_MIN: x // -1 is -x, x % -1 is 0 */
                return jj_int(op == OP_MOD ? 0 : jj_int_neg(I, x, "//"));
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q -= 1;
                m += y;
            }
            return jj_int(op == OP_FLOORDIV ? q : m);
        }
        case OP_POW:
            if (y < 0)
                return jj_float(pow((double)x, (double)y));
            return jj_int(ipow(I, x, y));
        }
    }
    double x = jj_num(a), y = jj_num(b);
    switch (op) {
    case OP_ADD: return jj_float(x + y);
    case OP_SUB: return jj_float(x - y);
    case OP_MUL: return jj_float(x * y);
    case OP_DIV:
        if (y == 0)
            jj_fail(I, SP_ERR_TEMPLATE, "division by zero");
        return jj_float(x / y);
    case OP_FLOORDIV:
        if (y == 0)
            jj_fail(I, SP_ERR_TEMPLATE, "float floor division by zero");
        return jj_float(floor(x / y));
    case OP_MOD: {
        if (y == 0)
            jj_fail(I, SP_ERR_TEMPLATE, "float modulo");
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0)))
            m += y;
        return jj_float(m);
    }
    case OP_POW: return jj_float(pow(x, y));
    }
    return jj_none();
}

jv jj_binop(jinterp *I, int op, jv a, jv b)
{
    if (a.k == JK_UNDEF)
        undefined_error(I, a);
    if (b.k == JK_UNDEF)
        undefined_error(I, b);
    if (jj_is_num(a) && jj_is_num(b))
        return num_binop(I, op, a, b);
    if (op == OP_ADD && a.k == JK_STR && b.k == JK_STR) {
        /* Markup + str escapes the str, and so does str + Markup */
        bool safe = a.safe || b.safe;
        if (safe) {
            a = jj_html_escape(I, a, false);
            b = jj_html_escape(I, b, false);
        }
        jbuf buf = {0};
        jj_buf_put(I, &buf, a.u.s->s, a.u.s->len);
        jj_buf_put(I, &buf, b.u.s->s, b.u.s->len);
        jv r = jj_str(I, buf.p, buf.n);
        r.safe = safe;
        return r;
    }
    if (op == OP_ADD && a.k == JK_LIST && b.k == JK_LIST && !((a.u.l->flags | b.u.l->flags) & JL_GEN) &&
        (a.u.l->flags & JL_TUPLE) == (b.u.l->flags & JL_TUPLE)) {
        jv out = jj_list(I, a.u.l->n + b.u.l->n, a.u.l->flags & JL_TUPLE);
        for (size_t i = 0; i < a.u.l->n; i++)
            jj_list_push(I, out.u.l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++)
            jj_list_push(I, out.u.l, b.u.l->v[i]);
        return out;
    }
    if (op == OP_MUL) {
        bool a_seq = a.k == JK_STR || (a.k == JK_LIST && !(a.u.l->flags & JL_GEN));
        bool b_seq = b.k == JK_STR || (b.k == JK_LIST && !(b.u.l->flags & JL_GEN));
        if (a_seq && (b.k == JK_INT || b.k == JK_BOOL))
            return repeat(I, a, b.k == JK_INT ? b.u.i : b.u.b);
        if (b_seq && (a.k == JK_INT || a.k == JK_BOOL))
            return repeat(I, b, a.k == JK_INT ? a.u.i : a.u.b);
    }
    if (op == OP_MOD && a.k == JK_STR)
        return jj_format_percent(I, a, b);
    if (op == OP_ADD && a.k == JK_STR)
        jj_fail(I, SP_ERR_TEMPLATE, "can only concatenate str (not \"%s\") to str", jj_type_name(b));
    jj_fail(I, SP_ERR_TEMPLATE, "unsupported operand type(s) for %s: '%s' and '%s'", op_symbol(op),
          jj_type_name(a), jj_type_name(b));
}

bool jj_contains(jinterp *I, jv needle, jv hay)
{
    switch ((jk)hay.k) {
    case JK_STR:
        if (needle.k == JK_UNDEF)
            undefined_error(I, needle);
        if (needle.k != JK_STR)
            jj_fail(I, SP_ERR_TEMPLATE, "'in <string>' requires string as left operand, not %s",
                  jj_type_name(needle));
        if (!needle.u.s->len)
            return true;
        for (size_t i = 0; i + needle.u.s->len <= hay.u.s->len; i++) {
            jj_work(I, needle.u.s->len);
            if (!memcmp(hay.u.s->s + i, needle.u.s->s, needle.u.s->len))
                return true;
        }
        return false;
    case JK_DICT: return jj_dict_get(I, hay.u.d, needle) != NULL;
    case JK_UNDEF: return false;
    default: {
        bool ok;
        jlist *l = jj_iterate(I, hay, &ok);
        if (!ok)
            jj_fail(I, SP_ERR_TEMPLATE, "argument of type '%s' is not iterable", jj_type_name(hay));
        for (size_t i = 0; i < l->n; i++) {
            jj_tick(I);
            if (jj_equal(I, l->v[i], needle))
                return true;
        }
        return false;
    }
    }
}

static jv compare(jinterp *I, int op, jv a, jv b)
{
    switch (op) {
    case OP_EQ: return jj_bool(jj_equal(I, a, b));
    case OP_NE: return jj_bool(!jj_equal(I, a, b));
    case OP_IN: return jj_bool(jj_contains(I, a, b));
    case OP_NOTIN: return jj_bool(!jj_contains(I, a, b));
    default: break;
    }
    int c = jj_compare(I, a, b);
    switch (op) {
    case OP_LT: return jj_bool(c < 0);
    case OP_LE: return jj_bool(c <= 0);
    case OP_GT: return jj_bool(c > 0);
    default: return jj_bool(c >= 0);
    }
}

/* ---- calls -------------------------------------------------------------------------------- */

static jv call_macro(jinterp *I, jmacro *m, jv *args, size_t n_args, const char **kw_names,
                     jv *kw_vals, size_t n_kw, jv caller)
{
    const jnode *def = m->def;
    const char *name = m->is_caller ? "caller" : def->name;
    if (++I->depth > JINJA_MAX_DEPTH)
        jj_fail(I, SP_ERR_LIMIT, "template recursion deeper than %d (macro '%s')", JINJA_MAX_DEPTH, name);
    jframe *f = new_frame(I, m->closure);
    size_t n_params = def->n_kids;
    bool *given = jj_alloc(I, (n_params ? n_params : 1) * sizeof *given);
    memset(given, 0, (n_params ? n_params : 1) * sizeof *given);
    for (size_t i = 0; i < n_params && i < n_args; i++) {
        set_var(I, f, def->kids[i]->name, args[i]);
        given[i] = true;
    }
    jv kwargs = jj_dict(I, 0);
    for (size_t k = 0; k < n_kw; k++) {
        size_t i = 0;
        while (i < n_params && strcmp(def->kids[i]->name, kw_names[k]))
            i++;
        if (i < n_params) {
            if (given[i])
                jj_fail(I, SP_ERR_TEMPLATE, "macro '%s' got multiple values for argument '%s'", name,
                      kw_names[k]);
            set_var(I, f, kw_names[k], kw_vals[k]);
            given[i] = true;
        } else if (def->uses_kwargs) {
            jj_dict_set(I, kwargs.u.d, jj_cstr(I, kw_names[k]), kw_vals[k]);
        } else {
            jj_fail(I, SP_ERR_TEMPLATE, "macro '%s' takes no keyword argument '%s'", name, kw_names[k]);
        }
    }
    if (n_args > n_params && !def->uses_varargs)
        jj_fail(I, SP_ERR_TEMPLATE, "macro '%s' takes not more than %zu argument(s)", name, n_params);
    for (size_t i = 0; i < n_params; i++) {
        if (given[i])
            continue;
        const jnode *d = def->kw_vals ? def->kw_vals[i] : NULL;
        set_var(I, f, def->kids[i]->name, d ? jj_eval(I, d, f) : jj_undef(def->kids[i]->name));
    }
    if (def->uses_varargs) {
        jv va = jj_list(I, 0, JL_TUPLE);
        for (size_t i = n_params; i < n_args; i++)
            jj_list_push(I, va.u.l, args[i]);
        set_var(I, f, "varargs", va);
    }
    if (def->uses_kwargs)
        set_var(I, f, "kwargs", kwargs);
    if (caller.k != JK_UNDEF) {
        if (!def->uses_caller && !m->is_caller)
            jj_fail(I, SP_ERR_TEMPLATE, "macro '%s' takes no keyword argument 'caller'", name);
        set_var(I, f, "caller", caller);
    }
    bool brk = I->brk, cont = I->cont;
    jv out = jj_capture(I, def->b, f);
    I->brk = brk;
    I->cont = cont;
    I->depth--;
    return out;
}

static jv run_for(jinterp *I, const jnode *n, jframe *f, jv iterable, int64_t depth0, bool capture);

static jv jj_call(jinterp *I, jv fn, jv *args, size_t n_args, const char **kw_names, jv *kw_vals,
         size_t n_kw)
{
    jj_tick(I);
    switch ((jk)fn.k) {
    case JK_MACRO: {
        jv caller = jj_undef(NULL);
        for (size_t k = 0; k < n_kw; k++)
            if (!strcmp(kw_names[k], "caller")) { /* caller=... passed explicitly */
                caller = kw_vals[k];
                kw_vals[k] = kw_vals[n_kw - 1];
                kw_names[k] = kw_names[n_kw - 1];
                n_kw--;
                break;
            }
        return call_macro(I, fn.u.m, args, n_args, kw_names, kw_vals, n_kw, caller);
    }
    case JK_FUNC: {
        struct jfunc *f = fn.u.fn;
        if (f->id == F_METHOD)
            return jj_method_call(I, f->self, f->name, args, n_args, kw_names, kw_vals, n_kw);
        if (f->id == F_LOOP_CALL) {
            if (n_args != 1)
                jj_fail(I, SP_ERR_TEMPLATE, "loop() takes exactly one argument");
            jloop *L = f->self.u.loop;
            return run_for(I, L->node, L->frame, args[0], L->depth0 + 1, true);
        }
        if (f->id == F_LOOP_CYCLE) {
            jloop *L = f->self.u.loop;
            if (!strcmp(f->name, "changed"))
                jj_fail(I, SP_ERR_TEMPLATE, "loop.changed() is not supported");
            if (n_args == 0)
                jj_fail(I, SP_ERR_TEMPLATE, "no items for cycling given");
            return args[L->index0 % (int64_t)n_args];
        }
        if (f->id == F_CYCLER_NEXT || f->id == F_CYCLER_RESET)
            return jj_global_call(I, f->id, &f->self, 1, NULL, NULL, 0);
        return jj_global_call(I, f->id, args, n_args, kw_names, kw_vals, n_kw);
    }
    case JK_LOOP: {
        if (!fn.u.loop->node->recursive)
            jj_fail(I, SP_ERR_TEMPLATE, "Tried to call non recursive loop.  Maybe you forgot the "
                                      "'recursive' modifier.");
        if (n_args != 1)
            jj_fail(I, SP_ERR_TEMPLATE, "loop() takes exactly one argument");
        jloop *L = fn.u.loop;
        return run_for(I, L->node, L->frame, args[0], L->depth0 + 1, true);
    }
    case JK_JOINER:
    case JK_CYCLER: return jj_global_call(I, fn.k == JK_JOINER ? F_JOINER_CALL : F_CYCLER_NEXT, &fn, 1, NULL, NULL, 0);
    case JK_UNDEF: undefined_error(I, fn);
    default: jj_fail(I, SP_ERR_TEMPLATE, "'%s' object is not callable", jj_type_name(fn));
    }
}

static void eval_args(jinterp *I, const jnode *n, jframe *f, jargs *A)
{
    jv dyn = n->dyn_args ? jj_eval(I, n->dyn_args, f) : jj_none();
    jlist *extra = NULL;
    if (n->dyn_args) {
        bool ok;
        extra = jj_iterate(I, dyn, &ok);
        if (!ok)
            jj_fail(I, SP_ERR_TEMPLATE, "argument after * must be an iterable, not %s", jj_type_name(dyn));
    }
    jv dk = n->dyn_kwargs ? jj_eval(I, n->dyn_kwargs, f) : jj_none();
    if (n->dyn_kwargs && dk.k != JK_DICT)
        jj_fail(I, SP_ERR_TEMPLATE, "argument after ** must be a mapping, not %s", jj_type_name(dk));
    size_t n_extra = extra ? extra->n : 0, n_dk = n->dyn_kwargs ? dk.u.d->n : 0;
    A->n = n->n_kids + n_extra;
    A->a = jj_alloc(I, (A->n ? A->n : 1) * sizeof *A->a);
    for (size_t i = 0; i < n->n_kids; i++)
        A->a[i] = jj_eval(I, n->kids[i], f);
    for (size_t i = 0; i < n_extra; i++)
        A->a[n->n_kids + i] = extra->v[i];
    A->nk = n->n_kw + n_dk;
    A->kv = jj_alloc(I, (A->nk ? A->nk : 1) * sizeof *A->kv);
    A->kn = jj_alloc(I, (A->nk ? A->nk : 1) * sizeof *A->kn);
    for (size_t i = 0; i < n->n_kw; i++) {
        A->kv[i] = jj_eval(I, n->kw_vals[i], f);
        A->kn[i] = n->kw_names[i];
    }
    for (size_t i = 0; i < n_dk; i++) {
        jv key = dk.u.d->keys[i];
        if (key.k != JK_STR)
            jj_fail(I, SP_ERR_TEMPLATE, "keywords must be strings");
        A->kv[n->n_kw + i] = dk.u.d->vals[i];
        A->kn[n->n_kw + i] = key.u.s->s;
    }
}

/* Applies a filter chain (innermost filter has a == NULL) to v. */
static jv apply_filter_chain(jinterp *I, const jnode *chain, jv v, jframe *f)
{
    if (chain->a)
        v = apply_filter_chain(I, chain->a, v, f);
    jargs A;
    eval_args(I, chain, f, &A);
    return jj_filter_apply(I, chain->name, v, A.a, A.n, A.kn, A.kv, A.nk, f);
}

/* ---- expressions ------------------------------------------------------------------------ */

static jv jj_eval(jinterp *I, const jnode *n, jframe *f)
{
    jj_tick(I);
    switch (n->kind) {
    case E_CONST: return n->value;
    case E_NAME: return jj_lookup(I, f, n->name);
    case E_LIST:
    case E_TUPLE: {
        jv l = jj_list(I, n->n_kids, n->kind == E_TUPLE ? JL_TUPLE : 0);
        for (size_t i = 0; i < n->n_kids; i++)
            jj_list_push(I, l.u.l, jj_eval(I, n->kids[i], f));
        return l;
    }
    case E_DICT: {
        jv d = jj_dict(I, n->n_kids / 2);
        for (size_t i = 0; i + 1 < n->n_kids; i += 2)
            jj_dict_set(I, d.u.d, jj_eval(I, n->kids[i], f), jj_eval(I, n->kids[i + 1], f));
        return d;
    }
    case E_ATTR: return jj_getattr(I, jj_eval(I, n->a, f), n->name);
    case E_ITEM: {
        jv obj = jj_eval(I, n->a, f);
        return jj_getitem(I, obj, jj_eval(I, n->b, f));
    }
    case E_SLICE: {
        jv obj = jj_eval(I, n->a, f);
        jv p[3];
        for (int i = 0; i < 3; i++)
            p[i] = n->kids[i] ? jj_eval(I, n->kids[i], f) : jj_none();
        return do_slice(I, obj, p[0], p[1], p[2]);
    }
    case E_CALL: {
        jv fn = jj_eval(I, n->a, f);
        jargs A;
        eval_args(I, n, f, &A);
        return jj_call(I, fn, A.a, A.n, A.kn, A.kv, A.nk);
    }
    case E_FILTER: {
        jv v = jj_eval(I, n->a, f);
        jargs A;
        eval_args(I, n, f, &A);
        return jj_filter_apply(I, n->name, v, A.a, A.n, A.kn, A.kv, A.nk, f);
    }
    case E_TEST: {
        jv v = jj_eval(I, n->a, f);
        jv *args = jj_alloc(I, (n->n_kids ? n->n_kids : 1) * sizeof *args);
        for (size_t i = 0; i < n->n_kids; i++)
            args[i] = jj_eval(I, n->kids[i], f);
        bool r = jj_test_apply(I, n->name, v, args, n->n_kids, f);
        return jj_bool(n->op ? !r : r);
    }
    case E_NEG:
    case E_POS: {
        jv v = jj_eval(I, n->a, f);
        if (v.k == JK_UNDEF)
            undefined_error(I, v);
        if (!jj_is_num(v))
            jj_fail(I, SP_ERR_TEMPLATE, "bad operand type for unary %c: '%s'", n->kind == E_NEG ? '-' : '+',
                  jj_type_name(v));
        if (n->kind == E_POS)
            return v.k == JK_BOOL ? jj_int(v.u.b) : v;
        return v.k == JK_FLOAT ? jj_float(-v.u.f) : jj_int(jj_int_neg(I, v.k == JK_INT ? v.u.i : v.u.b, "unary -"));
    }
    case E_NOT: return jj_bool(!jj_truthy(I, jj_eval(I, n->a, f)));
    case E_AND: {
        jv a = jj_eval(I, n->a, f);
        return jj_truthy(I, a) ? jj_eval(I, n->b, f) : a;
    }
    case E_OR: {
        jv a = jj_eval(I, n->a, f);
        return jj_truthy(I, a) ? a : jj_eval(I, n->b, f);
    }
    case E_BINOP: {
        jv a = jj_eval(I, n->a, f);
        return jj_binop(I, n->op, a, jj_eval(I, n->b, f));
    }
    case E_COMPARE: {
        jv a = jj_eval(I, n->a, f);
        return compare(I, n->op, a, jj_eval(I, n->b, f));
    }
    case E_CONCAT: {
        jbuf b = {0};
        for (size_t i = 0; i < n->n_kids; i++)
            jj_write_str(I, &b, jj_eval(I, n->kids[i], f));
        return jj_str(I, b.p ? b.p : "", b.n);
    }
    case E_COND:
        if (jj_truthy(I, jj_eval(I, n->a, f)))
            return jj_eval(I, n->b, f);
        return n->c ? jj_eval(I, n->c, f) : jj_undef("the inline if-expression evaluated to false");
    default: break;
    }
    jj_fail(I, SP_ERR_INTERNAL, "unexpected node %d in an expression", n->kind);
}

/* ---- statements -------------------------------------------------------------------------- */

static void assign(jinterp *I, const jnode *target, jv value, jframe *f)
{
    if (target->kind == E_NAME) {
        set_var(I, f, target->name, value);
        return;
    }
    if (target->kind == E_ATTR) {
        jv obj = jj_eval(I, target->a, f);
        if (obj.k != JK_NS)
            jj_fail(I, SP_ERR_TEMPLATE, "cannot assign attribute on non-namespace object");
        jj_dict_set(I, obj.u.d, jj_cstr(I, target->name), value);
        return;
    }
    if (target->kind == E_TUPLE) {
        bool ok;
        jlist *l = jj_iterate(I, value, &ok);
        if (!ok)
            jj_fail(I, SP_ERR_TEMPLATE, "cannot unpack non-iterable %s object", jj_type_name(value));
        if (l->n != target->n_kids)
            jj_fail(I, SP_ERR_TEMPLATE, l->n > target->n_kids ? "too many values to unpack (expected %zu)"
                                                            : "not enough values to unpack (expected %zu)",
                  target->n_kids);
        for (size_t i = 0; i < l->n; i++)
            assign(I, target->kids[i], l->v[i], f);
        return;
    }
    jj_fail(I, SP_ERR_TEMPLATE, "cannot assign to this expression");
}

static jv jj_capture(jinterp *I, const jnode *body, jframe *f)
{
    jbuf buf = {0}, *saved = I->out;
    I->out = &buf;
    jj_exec(I, body, f);
    I->out = saved;
    return jj_str(I, buf.p ? buf.p : "", buf.n);
}

static void write_out(jinterp *I, const char *s, size_t n)
{
    jj_buf_put(I, I->out, s, n);
}

static jv run_for(jinterp *I, const jnode *n, jframe *f, jv iterable, int64_t depth0, bool capture)
{
    if (++I->depth > JINJA_MAX_DEPTH)
        jj_fail(I, SP_ERR_LIMIT, "template recursion deeper than %d (recursive loop)", JINJA_MAX_DEPTH);
    bool ok;
    if (iterable.k == JK_NONE || !(iterable.k == JK_UNDEF || iterable.k == JK_STR ||
                                   iterable.k == JK_LIST || iterable.k == JK_DICT || iterable.k == JK_VIEW))
        jj_fail(I, SP_ERR_TEMPLATE, "'%s' object is not iterable", jj_type_name(iterable));
    jlist *items = jj_iterate(I, iterable, &ok);
    const jnode *target = n->kids[0];
    if (n->filter) {
        jlist *kept = jj_list(I, items->n, 0).u.l;
        for (size_t i = 0; i < items->n; i++) {
            jframe *tf = new_frame(I, f);
            assign(I, target, items->v[i], tf);
            if (jj_truthy(I, jj_eval(I, n->filter, tf)))
                jj_list_push(I, kept, items->v[i]);
        }
        items = kept;
    }
    jbuf buf = {0}, *saved = I->out;
    if (capture)
        I->out = &buf;
    jloop *L = jj_alloc(I, sizeof *L);
    memset(L, 0, sizeof *L);
    L->length = (int64_t)items->n;
    L->items = items;
    L->depth0 = depth0;
    L->node = n;
    L->frame = f;
    for (size_t i = 0; i < items->n; i++) {
        jframe *it = new_frame(I, f);
        jloop *cur = jj_alloc(I, sizeof *cur);
        *cur = *L;
        cur->index0 = (int64_t)i;
        assign(I, target, items->v[i], it);
        jv lv = {.k = JK_LOOP, .u = {.loop = cur}};
        set_var(I, it, "loop", lv);
        jj_exec(I, n->b, it);
        if (I->brk) {
            I->brk = false;
            break;
        }
        I->cont = false;
    }
    if (items->n == 0 && n->c)
        jj_exec(I, n->c, f);
    I->out = saved;
    I->depth--;
    return capture ? jj_str(I, buf.p ? buf.p : "", buf.n) : jj_none();
}

static void jj_exec(jinterp *I, const jnode *n, jframe *f)
{
    jj_tick(I);
    switch (n->kind) {
    case N_BODY:
        for (size_t i = 0; i < n->n_kids; i++) {
            jj_exec(I, n->kids[i], f);
            if (I->brk || I->cont)
                return;
        }
        return;
    case N_TEXT: write_out(I, n->value.u.s->s, n->value.u.s->len); return;
    case N_OUTPUT: jj_write_str(I, I->out, jj_eval(I, n->a, f)); return;
    case N_IF:
        if (jj_truthy(I, jj_eval(I, n->a, f)))
            jj_exec(I, n->b, f);
        else if (n->c)
            jj_exec(I, n->c, f);
        return;
    case N_FOR: run_for(I, n, f, jj_eval(I, n->a, f), 0, false); return;
    case N_SET: assign(I, n->a, jj_eval(I, n->b, f), f); return;
    case N_SET_BLOCK: {
        jv v = jj_capture(I, n->b, f);
        if (n->filter)
            v = apply_filter_chain(I, n->filter, v, f);
        assign(I, n->a, v, f);
        return;
    }
    case N_MACRO: {
        jmacro *m = jj_alloc(I, sizeof *m);
        memset(m, 0, sizeof *m);
        m->def = n;
        m->closure = f;
        m->caller = jj_undef(NULL);
        jv v = {.k = JK_MACRO, .u = {.m = m}};
        set_var(I, f, n->name, v);
        return;
    }
    case N_CALL_BLOCK: {
        const jnode *call = n->a;
        jv fn = jj_eval(I, call->a, f);
        jargs A;
        eval_args(I, call, f, &A);
        jmacro *cm = jj_alloc(I, sizeof *cm);
        memset(cm, 0, sizeof *cm);
        cm->def = n;
        cm->closure = f;
        cm->is_caller = true;
        cm->caller = jj_undef(NULL);
        jv caller = {.k = JK_MACRO, .u = {.m = cm}};
        if (fn.k != JK_MACRO)
            jj_fail(I, SP_ERR_TEMPLATE, "a call block needs a macro, got '%s'", jj_type_name(fn));
        jv out = call_macro(I, fn.u.m, A.a, A.n, A.kn, A.kv, A.nk, caller);
        jj_write_str(I, I->out, out);
        return;
    }
    case N_FILTER_BLOCK: {
        jv v = jj_capture(I, n->b, f);
        jj_write_str(I, I->out, apply_filter_chain(I, n->filter, v, f));
        return;
    }
    case N_BREAK: I->brk = true; return;
    case N_CONTINUE: I->cont = true; return;
    default: break;
    }
    jj_fail(I, SP_ERR_INTERNAL, "unexpected node %d in a statement", n->kind);
}

/* ---- entry points ----------------------------------------------------------------------- */

sp_status sp_jinja_compile(const char *src, size_t n, sp_jinja_template **out, sp_error *err)
{
    static const sp_jinja_syntax hf = {.trim_blocks = true, .lstrip_blocks = true};
    return sp_jinja_compile_syntax(src, n, &hf, out, err);
}

sp_status sp_jinja_compile_syntax(const char *src, size_t n, const sp_jinja_syntax *syn,
                                  sp_jinja_template **out, sp_error *err)
{
    *out = NULL;
    sp_jinja_template *t = calloc(1, sizeof *t);
    if (!t)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    jinterp *I = &t->parse;
    I->err = err;
    I->arena.limit = JINJA_ARENA_LIMIT;
    if (setjmp(I->fail)) {
        sp_status st = I->status;
        jj_free_all(&I->arena);
        free(t);
        return st;
    }
    jtokens toks = {0};
    jj_lex(I, src, n, syn, &toks);
    t->root = jj_parse(I, &toks);
    I->err = NULL;
    *out = t;
    return SP_OK;
}

void sp_jinja_free(sp_jinja_template *t)
{
    if (!t)
        return;
    jj_free_all(&t->parse.arena);
    free(t);
}

static jv default_var(jinterp *I, const sp_jinja_var *v)
{
    switch (v->type) {
    case SP_JVAR_STR: return jj_cstr(I, v->str ? v->str : "");
    case SP_JVAR_BOOL: return jj_bool(v->b);
    case SP_JVAR_NONE: return jj_none();
    case SP_JVAR_JSON: return jj_from_json_text(I, v->str, strlen(v->str), v->name);
    }
    return jj_none();
}

sp_status sp_jinja_render(const sp_jinja_template *t, const sp_jinja_var *defaults,
                          size_t n_defaults, const char *ctx_json, size_t ctx_len,
                          const sp_jinja_options *opt, char **out, size_t *out_len,
                          sp_error *err)
{
    *out = NULL;
    jinterp *I = calloc(1, sizeof *I);
    if (!I)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    I->err = err;
    I->arena.limit = JINJA_ARENA_LIMIT;
    static const sp_jinja_options no_opt = {0};
    I->opt = opt ? opt : &no_opt;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double limit = I->opt->time_limit_ms > 0 ? I->opt->time_limit_ms : 10000.0;
    I->deadline_ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6 + limit;
    if (setjmp(I->fail)) {
        sp_status st = I->status;
        jj_free_all(&I->arena);
        free(I);
        return st;
    }
    jbuf buf = {0};
    I->out = &buf;
    I->root = new_frame(I, NULL);
    for (size_t i = 0; i < n_defaults; i++)
        set_var(I, I->root, defaults[i].name, default_var(I, &defaults[i]));
    if (ctx_json) {
        jv ctx = jj_from_json_text(I, ctx_json, ctx_len, "chat context");
        if (ctx.k != JK_DICT)
            jj_fail(I, SP_ERR_FORMAT, "chat context: expected a JSON object of template variables");
        for (size_t i = 0; i < ctx.u.d->n; i++)
            jj_dict_set(I, &I->root->vars, ctx.u.d->keys[i], ctx.u.d->vals[i]);
    }
    jj_exec(I, t->root, I->root);
    char *res = malloc(buf.n + 1);
    if (!res) {
        jj_free_all(&I->arena);
        free(I);
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    if (buf.n)
        memcpy(res, buf.p, buf.n);
    res[buf.n] = '\0';
    *out = res;
    if (out_len)
        *out_len = buf.n;
    jj_free_all(&I->arena);
    free(I);
    return SP_OK;
}
