/* jinja_parse.c: tokens to AST, following Jinja2's grammar and operator precedence:
 *
 *   expr    := or ['if' or ['else' expr]]
 *   or      := and ('or' and)*          and := not ('and' not)*
 *   not     := 'not' not | compare      compare := math1 (cmpop math1)*
 *   math1   := concat (('+'|'-') concat)*
 *   concat  := math2 ('~' math2)*       math2 := pow (('*'|'/'|'//'|'%') pow)*
 *   pow     := unary ('**' unary)*      unary := ('-'|'+') unary | primary postfix* filters
 *
 * Statements: if/elif/else, for (else, inline if, recursive), set (also block form and
 * namespace attributes), macro, call, filter, break, continue, generation. Unknown tags,
 * filters and tests are errors at compile time, as in Jinja2. */
#include "text/jinja/jinja_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct parser {
    jinterp *I;
    const jtokens *t;
    size_t pos;
    int depth;
    int in_macro;
    jnode *macro; /* macro being parsed, to record varargs/kwargs/caller use */
} parser;

static const jtoken *cur(parser *P) { return &P->t->v[P->pos]; }
static const jtoken *peek_at(parser *P, size_t k)
{
    size_t i = P->pos + k;
    return i < P->t->n ? &P->t->v[i] : &P->t->v[P->t->n - 1];
}

_Noreturn static void perr(parser *P, const char *fmt, const char *arg)
{
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    jj_fail(P->I, SP_ERR_TEMPLATE, "template syntax error at line %d: %s", cur(P)->line, msg);
}

static bool is_op(parser *P, const char *op)
{
    return cur(P)->type == T_OP && strcmp(cur(P)->s, op) == 0;
}

static bool is_name(parser *P, const char *name)
{
    return cur(P)->type == T_NAME && strcmp(cur(P)->s, name) == 0;
}

static bool skip_op(parser *P, const char *op)
{
    if (!is_op(P, op))
        return false;
    P->pos++;
    return true;
}

static bool skip_name(parser *P, const char *name)
{
    if (!is_name(P, name))
        return false;
    P->pos++;
    return true;
}

static void expect_op(parser *P, const char *op)
{
    if (!skip_op(P, op))
        perr(P, "expected '%s'", op);
}

static const char *expect_name(parser *P)
{
    if (cur(P)->type != T_NAME)
        perr(P, "expected a name%s", NULL);
    return P->t->v[P->pos++].s;
}

static jnode *node(parser *P, jnk kind)
{
    jnode *n = jj_alloc(P->I, sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->line = cur(P)->line;
    return n;
}

/* Growable child arrays built on the arena. */
typedef struct kids {
    jnode **v;
    size_t n, cap;
} kids;

static void kpush(parser *P, kids *k, jnode *n)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 8;
        jnode **v = jj_alloc(P->I, cap * sizeof *v);
        if (k->n)
            memcpy(v, k->v, k->n * sizeof *v);
        k->v = v;
        k->cap = cap;
    }
    k->v[k->n++] = n;
}

static void enter(parser *P)
{
    if (++P->depth > JINJA_MAX_PARSE_DEPTH)
        jj_fail(P->I, SP_ERR_LIMIT, "template nested more than %d levels deep", JINJA_MAX_PARSE_DEPTH);
}

/* A flat chain (a + b + c, x | f | g, a.b.c[0]) parses in a loop but builds a left-deep
 * tree that evaluation walks recursively, one frame per link: every link counts as a
 * level, so the tree height, and with it the evaluator's stack, stays bounded. The caller
 * restores P->depth when the chain ends. */
static void chain_link(parser *P)
{
    if (++P->depth > JINJA_MAX_PARSE_DEPTH)
        jj_fail(P->I, SP_ERR_LIMIT,
              "template expression nested or chained more than %d levels deep (line %d)",
              JINJA_MAX_PARSE_DEPTH, cur(P)->line);
}

static jnode *parse_expr(parser *P);
static jnode *parse_or(parser *P);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_body(parser *P, const char *const *ends, const char **ended);

/* ---- calls, filters, tests --------------------------------------------------------------- */

/* Parses "(args)" after the opening parenthesis into n. */
static void parse_call_args(parser *P, jnode *n)
{
    kids pos = {0}, kwv = {0};
    const char *kwn[64];
    size_t n_kw = 0;
    while (!skip_op(P, ")")) {
        if (pos.n || n_kw || n->dyn_args || n->dyn_kwargs)
            expect_op(P, ",");
        if (skip_op(P, ")"))
            break;
        if (skip_op(P, "*")) {
            if (n->dyn_args || n->dyn_kwargs)
                perr(P, "invalid syntax for function call expression%s", NULL);
            n->dyn_args = parse_expr(P);
            continue;
        }
        if (skip_op(P, "**")) {
            if (n->dyn_kwargs)
                perr(P, "invalid syntax for function call expression%s", NULL);
            n->dyn_kwargs = parse_expr(P);
            continue;
        }
        if (cur(P)->type == T_NAME && peek_at(P, 1)->type == T_OP && !strcmp(peek_at(P, 1)->s, "=")) {
            if (n->dyn_kwargs)
                perr(P, "invalid syntax for function call expression%s", NULL);
            if (n_kw == 64)
                perr(P, "too many keyword arguments%s", NULL);
            kwn[n_kw++] = expect_name(P);
            P->pos++;
            kpush(P, &kwv, parse_expr(P));
            continue;
        }
        if (n_kw || n->dyn_args || n->dyn_kwargs)
            perr(P, "invalid syntax for function call expression%s", NULL);
        kpush(P, &pos, parse_expr(P));
    }
    n->kids = pos.v;
    n->n_kids = pos.n;
    n->n_kw = n_kw;
    if (n_kw) {
        n->kw_names = jj_alloc(P->I, n_kw * sizeof *n->kw_names);
        memcpy(n->kw_names, kwn, n_kw * sizeof *kwn);
        n->kw_vals = kwv.v;
    }
}

static jnode *parse_filter(parser *P, jnode *arg)
{
    jnode *f = node(P, E_FILTER);
    const char *name = expect_name(P);
    if (!jj_filter_exists(name))
        perr(P, "no filter named '%s'", name);
    f->name = name;
    f->a = arg;
    if (skip_op(P, "("))
        parse_call_args(P, f);
    return f;
}

static jnode *parse_test(parser *P, jnode *arg)
{
    jnode *t = node(P, E_TEST);
    t->op = skip_name(P, "not");
    const char *name = expect_name(P);
    if (!jj_test_exists(name))
        perr(P, "no test named '%s'", name);
    t->name = name;
    t->a = arg;
    if (skip_op(P, "(")) {
        parse_call_args(P, t);
    } else {
        const jtoken *c = cur(P);
        bool starts_arg = c->type == T_STRING || c->type == T_INT || c->type == T_FLOAT ||
                          (c->type == T_NAME && strcmp(c->s, "else") && strcmp(c->s, "or") &&
                           strcmp(c->s, "and") && strcmp(c->s, "if") && strcmp(c->s, "in") &&
                           strcmp(c->s, "not") && strcmp(c->s, "is")) ||
                          (c->type == T_OP && (!strcmp(c->s, "[") || !strcmp(c->s, "{") || !strcmp(c->s, "(")));
        if (starts_arg) {
            jnode *a = parse_unary(P, false);
            t->kids = jj_alloc(P->I, sizeof *t->kids);
            t->kids[0] = a;
            t->n_kids = 1;
        }
    }
    return t;
}

/* ---- primaries ---------------------------------------------------------------------------- */

static jnode *const_node(parser *P, jv v)
{
    jnode *n = node(P, E_CONST);
    n->value = v;
    return n;
}

static jnode *parse_seq(parser *P, jnk kind, const char *close)
{
    jnode *n = node(P, kind);
    kids k = {0};
    while (!skip_op(P, close)) {
        if (k.n)
            expect_op(P, ",");
        if (skip_op(P, close))
            break;
        kpush(P, &k, parse_expr(P));
    }
    n->kids = k.v;
    n->n_kids = k.n;
    return n;
}

static jnode *parse_primary(parser *P)
{
    const jtoken *t = cur(P);
    jnode *n;
    switch (t->type) {
    case T_NAME:
        P->pos++;
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True"))
            return const_node(P, jj_bool(true));
        if (!strcmp(t->s, "false") || !strcmp(t->s, "False"))
            return const_node(P, jj_bool(false));
        if (!strcmp(t->s, "none") || !strcmp(t->s, "None"))
            return const_node(P, jj_none());
        n = node(P, E_NAME);
        n->name = t->s;
        if (P->macro && !strcmp(t->s, "varargs"))
            P->macro->uses_varargs = true;
        if (P->macro && !strcmp(t->s, "kwargs"))
            P->macro->uses_kwargs = true;
        if (P->macro && !strcmp(t->s, "caller"))
            P->macro->uses_caller = true;
        return n;
    case T_STRING: {
        /* adjacent string literals concatenate */
        size_t total = 0, k = P->pos;
        while (P->t->v[k].type == T_STRING)
            total += P->t->v[k++].len;
        char *buf = jj_alloc(P->I, total + 1);
        size_t o = 0;
        while (cur(P)->type == T_STRING) {
            memcpy(buf + o, cur(P)->s, cur(P)->len);
            o += cur(P)->len;
            P->pos++;
        }
        buf[o] = '\0';
        return const_node(P, jj_str(P->I, buf, o));
    }
    case T_INT: P->pos++; return const_node(P, jj_int(t->i));
    case T_FLOAT: P->pos++; return const_node(P, jj_float(t->f));
    case T_OP:
        if (skip_op(P, "(")) {
            if (skip_op(P, ")"))
                return node(P, E_TUPLE);
            jnode *e = parse_expr(P);
            if (!is_op(P, ","))
                return expect_op(P, ")"), e;
            jnode *tup = node(P, E_TUPLE);
            kids k = {0};
            kpush(P, &k, e);
            while (skip_op(P, ",")) {
                if (is_op(P, ")"))
                    break;
                kpush(P, &k, parse_expr(P));
            }
            expect_op(P, ")");
            tup->kids = k.v;
            tup->n_kids = k.n;
            return tup;
        }
        if (skip_op(P, "["))
            return parse_seq(P, E_LIST, "]");
        if (skip_op(P, "{")) {
            jnode *d = node(P, E_DICT);
            kids k = {0};
            while (!skip_op(P, "}")) {
                if (k.n)
                    expect_op(P, ",");
                if (skip_op(P, "}"))
                    break;
                kpush(P, &k, parse_expr(P));
                expect_op(P, ":");
                kpush(P, &k, parse_expr(P));
            }
            d->kids = k.v;
            d->n_kids = k.n;
            return d;
        }
        break;
    default: break;
    }
    perr(P, "unexpected '%s'", t->type == T_OP ? t->s : t->type == T_EOF ? "end of template" : "token");
}

static jnode *parse_subscript(parser *P, jnode *obj)
{
    jnode *parts[3] = {NULL, NULL, NULL};
    int n_colons = 0;
    if (!is_op(P, ":"))
        parts[0] = parse_expr(P);
    while (skip_op(P, ":")) {
        if (++n_colons > 2)
            perr(P, "invalid slice%s", NULL);
        if (!is_op(P, ":") && !is_op(P, "]"))
            parts[n_colons] = parse_expr(P);
    }
    expect_op(P, "]");
    if (!n_colons) {
        jnode *n = node(P, E_ITEM);
        n->a = obj;
        n->b = parts[0];
        return n;
    }
    jnode *n = node(P, E_SLICE);
    n->a = obj;
    n->kids = jj_alloc(P->I, 3 * sizeof *n->kids);
    memcpy(n->kids, parts, sizeof parts);
    n->n_kids = 3;
    return n;
}

static jnode *parse_postfix(parser *P, jnode *n)
{
    for (int d0 = P->depth;; chain_link(P)) {
        if (skip_op(P, ".")) {
            jnode *a;
            if (cur(P)->type == T_INT) { /* x.0 is x[0] */
                a = node(P, E_ITEM);
                a->a = n;
                a->b = const_node(P, jj_int(cur(P)->i));
                P->pos++;
            } else {
                a = node(P, E_ATTR);
                a->a = n;
                a->name = expect_name(P);
            }
            n = a;
        } else if (skip_op(P, "[")) {
            n = parse_subscript(P, n);
        } else if (skip_op(P, "(")) {
            jnode *c = node(P, E_CALL);
            c->a = n;
            parse_call_args(P, c);
            n = c;
        } else {
            P->depth = d0;
            return n;
        }
    }
}

static jnode *parse_filters(parser *P, jnode *n)
{
    for (int d0 = P->depth;; chain_link(P)) {
        if (skip_op(P, "|"))
            n = parse_filter(P, n);
        else if (skip_name(P, "is"))
            n = parse_test(P, n);
        else if (skip_op(P, "(")) {
            jnode *c = node(P, E_CALL);
            c->a = n;
            parse_call_args(P, c);
            n = c;
        } else {
            P->depth = d0;
            return n;
        }
    }
}

static jnode *parse_unary(parser *P, bool with_filter)
{
    enter(P);
    jnode *n;
    if (skip_op(P, "-")) {
        n = node(P, E_NEG);
        n->a = parse_unary(P, false);
    } else if (skip_op(P, "+")) {
        n = node(P, E_POS);
        n->a = parse_unary(P, false);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter)
        n = parse_filters(P, n);
    P->depth--;
    return n;
}

static jnode *binop(parser *P, int op, jnode *a, jnode *b)
{
    jnode *n = node(P, E_BINOP);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *P)
{
    jnode *l = parse_unary(P, true);
    int d0 = P->depth;
    while (skip_op(P, "**")) {
        chain_link(P);
        l = binop(P, OP_POW, l, parse_unary(P, true));
    }
    P->depth = d0;
    return l;
}

static jnode *parse_math2(parser *P)
{
    jnode *l = parse_pow(P);
    for (int d0 = P->depth;; chain_link(P)) {
        int op = is_op(P, "*") ? OP_MUL : is_op(P, "/") ? OP_DIV : is_op(P, "//") ? OP_FLOORDIV
                 : is_op(P, "%") ? OP_MOD : -1;
        if (op < 0) {
            P->depth = d0;
            return l;
        }
        P->pos++;
        l = binop(P, op, l, parse_pow(P));
    }
}

static jnode *parse_concat(parser *P)
{
    jnode *first = parse_math2(P);
    if (!is_op(P, "~"))
        return first;
    jnode *c = node(P, E_CONCAT);
    kids k = {0};
    kpush(P, &k, first);
    while (skip_op(P, "~"))
        kpush(P, &k, parse_math2(P));
    c->kids = k.v;
    c->n_kids = k.n;
    return c;
}

static jnode *parse_math1(parser *P)
{
    jnode *l = parse_concat(P);
    for (int d0 = P->depth;; chain_link(P)) {
        int op = is_op(P, "+") ? OP_ADD : is_op(P, "-") ? OP_SUB : -1;
        if (op < 0) {
            P->depth = d0;
            return l;
        }
        P->pos++;
        l = binop(P, op, l, parse_concat(P));
    }
}

static jnode *parse_compare(parser *P)
{
    jnode *l = parse_math1(P);
    for (int d0 = P->depth;; chain_link(P)) {
        int op = is_op(P, "==") ? OP_EQ : is_op(P, "!=") ? OP_NE : is_op(P, "<") ? OP_LT
                 : is_op(P, "<=") ? OP_LE : is_op(P, ">") ? OP_GT : is_op(P, ">=") ? OP_GE
                 : is_name(P, "in") ? OP_IN : -1;
        if (op < 0 && is_name(P, "not") && peek_at(P, 1)->type == T_NAME && !strcmp(peek_at(P, 1)->s, "in")) {
            P->pos++;
            op = OP_NOTIN;
        }
        if (op < 0) {
            P->depth = d0;
            return l;
        }
        P->pos++;
        jnode *c = node(P, E_COMPARE);
        c->op = op;
        c->a = l;
        c->b = parse_math1(P);
        l = c;
    }
}

static jnode *parse_not(parser *P)
{
    if (skip_name(P, "not")) {
        enter(P);
        jnode *n = node(P, E_NOT);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P)
{
    jnode *l = parse_not(P);
    int d0 = P->depth;
    while (skip_name(P, "and")) {
        chain_link(P);
        jnode *n = node(P, E_AND);
        n->a = l;
        n->b = parse_not(P);
        l = n;
    }
    P->depth = d0;
    return l;
}

static jnode *parse_or(parser *P)
{
    jnode *l = parse_and(P);
    int d0 = P->depth;
    while (skip_name(P, "or")) {
        chain_link(P);
        jnode *n = node(P, E_OR);
        n->a = l;
        n->b = parse_and(P);
        l = n;
    }
    P->depth = d0;
    return l;
}

static jnode *parse_expr(parser *P)
{
    int d0 = P->depth;
    enter(P);
    jnode *e = parse_or(P);
    while (skip_name(P, "if")) {
        chain_link(P);
        jnode *c = node(P, E_COND);
        c->b = e;
        c->a = parse_or(P);
        if (skip_name(P, "else"))
            c->c = parse_expr(P);
        e = c;
    }
    P->depth = d0;
    return e;
}

/* A tuple without parentheses (for targets, set statements, for iterables). */
static jnode *parse_tuple_expr(parser *P, bool names_only)
{
    jnode *first = names_only ? parse_primary(P) : parse_expr(P);
    if (names_only && first->kind == E_NAME && skip_op(P, ".")) {
        jnode *a = node(P, E_ATTR); /* set ns.attr */
        a->a = first;
        a->name = expect_name(P);
        return a;
    }
    if (!is_op(P, ","))
        return first;
    jnode *t = node(P, E_TUPLE);
    kids k = {0};
    kpush(P, &k, first);
    while (skip_op(P, ",")) {
        if (is_op(P, "=") || is_name(P, "in") || cur(P)->type == T_BLOCK_END)
            break;
        kpush(P, &k, names_only ? parse_primary(P) : parse_expr(P));
    }
    t->kids = k.v;
    t->n_kids = k.n;
    return t;
}

/* ---- statements -------------------------------------------------------------------------- */

static void expect_block_end(parser *P)
{
    if (cur(P)->type != T_BLOCK_END)
        perr(P, "expected the end of the tag, got '%s'", cur(P)->type == T_NAME || cur(P)->type == T_OP ? cur(P)->s : "token");
    P->pos++;
}

static jnode *parse_if(parser *P)
{
    jnode *n = node(P, N_IF);
    n->a = parse_expr(P);
    expect_block_end(P);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *ended;
    n->b = parse_body(P, ends, &ended);
    if (!strcmp(ended, "elif")) {
        jnode *body = node(P, N_BODY);
        body->kids = jj_alloc(P->I, sizeof *body->kids);
        body->kids[0] = parse_if(P); /* consumes through endif */
        body->n_kids = 1;
        n->c = body;
        return n;
    }
    if (!strcmp(ended, "else")) {
        expect_block_end(P);
        static const char *const e2[] = {"endif", NULL};
        n->c = parse_body(P, e2, &ended);
    }
    expect_block_end(P);
    return n;
}

static jnode *parse_for(parser *P)
{
    jnode *n = node(P, N_FOR);
    jnode *target = parse_tuple_expr(P, true);
    if (target->kind != E_NAME && target->kind != E_TUPLE)
        perr(P, "invalid for-loop target%s", NULL);
    n->kids = jj_alloc(P->I, sizeof *n->kids);
    n->kids[0] = target;
    n->n_kids = 1;
    if (!skip_name(P, "in"))
        perr(P, "expected 'in'%s", NULL);
    n->a = parse_or(P); /* the iterable: no conditional expression (its 'if' filters) */
    if (skip_name(P, "if"))
        n->filter = parse_expr(P);
    n->recursive = skip_name(P, "recursive");
    expect_block_end(P);
    static const char *const ends[] = {"else", "endfor", NULL};
    const char *ended;
    n->b = parse_body(P, ends, &ended);
    if (!strcmp(ended, "else")) {
        expect_block_end(P);
        static const char *const e2[] = {"endfor", NULL};
        n->c = parse_body(P, e2, &ended);
    }
    expect_block_end(P);
    return n;
}

static jnode *parse_filter_chain(parser *P)
{
    /* "name(args) | name" applied to a placeholder filled at run time */
    jnode *chain = parse_filter(P, NULL);
    while (skip_op(P, "|"))
        chain = parse_filter(P, chain);
    return chain;
}

static jnode *parse_set(parser *P)
{
    jnode *target = parse_tuple_expr(P, true);
    if (skip_op(P, "=")) {
        jnode *n = node(P, N_SET);
        n->a = target;
        n->b = parse_tuple_expr(P, false);
        expect_block_end(P);
        return n;
    }
    if (target->kind != E_NAME && target->kind != E_ATTR)
        perr(P, "expected '='%s", NULL);
    jnode *n = node(P, N_SET_BLOCK);
    n->a = target;
    if (skip_op(P, "|"))
        n->filter = parse_filter_chain(P);
    expect_block_end(P);
    static const char *const ends[] = {"endset", NULL};
    const char *ended;
    n->b = parse_body(P, ends, &ended);
    expect_block_end(P);
    return n;
}

/* Parameters "(a, b=1)" of a macro or caller: kids are E_NAME nodes, defaults in kw_vals
 * (NULL when none). */
static void parse_params(parser *P, jnode *n)
{
    kids names = {0}, defs = {0};
    if (skip_op(P, "(")) {
        while (!skip_op(P, ")")) {
            if (names.n)
                expect_op(P, ",");
            if (skip_op(P, ")"))
                break;
            jnode *nm = node(P, E_NAME);
            nm->name = expect_name(P);
            kpush(P, &names, nm);
            kpush(P, &defs, skip_op(P, "=") ? parse_expr(P) : NULL);
        }
    }
    n->kids = names.v;
    n->n_kids = names.n;
    n->kw_vals = defs.v;
}

static jnode *parse_macro(parser *P)
{
    jnode *n = node(P, N_MACRO);
    n->name = expect_name(P);
    jnode *outer = P->macro;
    P->macro = n;
    parse_params(P, n);
    expect_block_end(P);
    static const char *const ends[] = {"endmacro", NULL};
    const char *ended;
    n->b = parse_body(P, ends, &ended);
    skip_name(P, n->name);
    expect_block_end(P);
    P->macro = outer;
    return n;
}

static jnode *parse_call_block(parser *P)
{
    jnode *n = node(P, N_CALL_BLOCK);
    jnode *outer = P->macro;
    jnode params = {0};
    P->macro = n;
    if (is_op(P, "("))
        parse_params(P, &params);
    n->kids = params.kids;
    n->n_kids = params.n_kids;
    n->kw_vals = params.kw_vals;
    P->macro = outer;
    n->a = parse_expr(P);
    if (n->a->kind != E_CALL)
        perr(P, "expected a call after 'call'%s", NULL);
    expect_block_end(P);
    static const char *const ends[] = {"endcall", NULL};
    const char *ended;
    P->macro = n;
    n->b = parse_body(P, ends, &ended);
    P->macro = outer;
    expect_block_end(P);
    return n;
}

static jnode *parse_statement(parser *P)
{
    const char *tag = expect_name(P);
    if (!strcmp(tag, "if"))
        return parse_if(P);
    if (!strcmp(tag, "for"))
        return parse_for(P);
    if (!strcmp(tag, "set"))
        return parse_set(P);
    if (!strcmp(tag, "macro"))
        return parse_macro(P);
    if (!strcmp(tag, "call"))
        return parse_call_block(P);
    if (!strcmp(tag, "filter")) {
        jnode *n = node(P, N_FILTER_BLOCK);
        n->filter = parse_filter_chain(P);
        expect_block_end(P);
        static const char *const ends[] = {"endfilter", NULL};
        const char *ended;
        n->b = parse_body(P, ends, &ended);
        expect_block_end(P);
        return n;
    }
    if (!strcmp(tag, "generation")) {
        expect_block_end(P);
        static const char *const ends[] = {"endgeneration", NULL};
        const char *ended;
        jnode *b = parse_body(P, ends, &ended);
        expect_block_end(P);
        return b;
    }
    if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        jnode *n = node(P, tag[0] == 'b' ? N_BREAK : N_CONTINUE);
        expect_block_end(P);
        return n;
    }
    perr(P, "unknown or unsupported tag '%s'", tag);
}

/* Parses statements until one of `ends` (a block tag name) or the end of the template
 * (when ends is NULL). *ended receives the tag found; its name has been consumed. */
static jnode *parse_body(parser *P, const char *const *ends, const char **ended)
{
    enter(P);
    jnode *body = node(P, N_BODY);
    kids k = {0};
    for (;;) {
        const jtoken *t = cur(P);
        if (t->type == T_EOF) {
            if (ends)
                perr(P, "unexpected end of template: missing '{%% %s %%}'", ends[0]);
            break;
        }
        if (t->type == T_TEXT) {
            jnode *n = node(P, N_TEXT);
            n->value = jj_str(P->I, t->s, t->len);
            kpush(P, &k, n);
            P->pos++;
        } else if (t->type == T_VAR_BEGIN) {
            P->pos++;
            jnode *n = node(P, N_OUTPUT);
            n->a = parse_tuple_expr(P, false);
            if (cur(P)->type != T_VAR_END)
                perr(P, "expected '}}'%s", NULL);
            P->pos++;
            kpush(P, &k, n);
        } else if (t->type == T_BLOCK_BEGIN) {
            P->pos++;
            if (ends && cur(P)->type == T_NAME) {
                bool hit = false;
                for (const char *const *e = ends; *e; e++)
                    if (!strcmp(cur(P)->s, *e)) {
                        *ended = *e;
                        hit = true;
                    }
                if (hit) {
                    P->pos++;
                    break;
                }
            }
            kpush(P, &k, parse_statement(P));
        } else {
            perr(P, "unexpected token%s", NULL);
        }
    }
    body->kids = k.v;
    body->n_kids = k.n;
    P->depth--;
    return body;
}

jnode *jj_parse(jinterp *I, const jtokens *toks)
{
    parser P = {I, toks, 0, 0, 0, NULL};
    const char *ended = NULL;
    return parse_body(&P, NULL, &ended);
}
