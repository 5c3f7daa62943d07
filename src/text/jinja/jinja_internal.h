/* jinja_internal.h: the data model of specula's Jinja engine, shared by its files:
 *
 *   jinja_value.c    values (Python semantics: truthiness, str/repr, equality, order)
 *   jinja_lex.c      template text -> tokens (delimiters, whitespace control)
 *   jinja_parse.c    tokens -> AST
 *   jinja_eval.c     AST -> output (scopes, loops, macros, calls)
 *   jinja_filters.c  filters and tests
 *   jinja_str.c      Python str semantics: case, strip, split, find, format, str methods
 *   jinja_methods.c  method lookup, dict / list methods, globals
 *
 * Memory: everything a template or a render allocates comes from an arena freed at once,
 * so values need no reference counts. Errors (template errors, limits) longjmp back to
 * the entry point with a message; nothing is leaked because the arenas own everything.
 *
 * Semantics follow Python Jinja2 3.1 in the environment transformers uses for chat
 * templates: ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, a
 * passthrough {% generation %} tag, transformers' tojson, raise_exception, strftime_now.
 *
 * Where specula differs from Python on purpose:
 *   - Integers are int64 (Python's are unbounded). Any result that does not fit (+ - * **
 *     // % and unary minus, abs, sum, int(), integer literals, JSON context integers) is a
 *     template error, SP_ERR_TEMPLATE "integer overflow ..." (exit 3); never a wrong number
 *     and never a trap (INT64_MIN // -1).
 *   - Everything is bounded (jinja.h): steps, time, output, strings, memory, macro
 *     recursion, nesting of the source (flat chains such as a + b + ... or x | f | g count
 *     one level per link, since evaluation recurses once per link), and nesting of values
 *     (comparing, printing or serializing a list nested deeper than 500 is an error, where
 *     Python raises RecursionError). Comparisons, sorts, membership tests, repr, tojson and
 *     substring searches charge the budgets as they go, so shared values
 *     (`ns.l = [ns.l, ns.l]`) cannot escape the time limit. */
#ifndef SP_TEXT_JINJA_INTERNAL_H
#define SP_TEXT_JINJA_INTERNAL_H

#include "text/jinja/jinja.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ---- arena -------------------------------------------------------------------------------- */

typedef struct ja_chunk {
    struct ja_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} ja_chunk;

typedef struct jarena {
    ja_chunk *head;
    size_t total, limit;
} jarena;

/* ---- values ------------------------------------------------------------------------------- */

typedef enum jk {
    JK_UNDEF,
    JK_NONE,
    JK_BOOL,
    JK_INT,
    JK_FLOAT,
    JK_STR,
    JK_LIST,   /* list, tuple (flag), or generator (flag; iterable once, no len) */
    JK_DICT,
    JK_NS,     /* namespace(): a dict with attribute assignment */
    JK_FUNC,   /* builtin function or bound method */
    JK_MACRO,  /* macro, or the caller of a call block */
    JK_LOOP,   /* the loop variable */
    JK_VIEW,   /* dict.keys() / values() / items() */
    JK_CYCLER,
    JK_JOINER,
} jk;

typedef struct jstr {
    size_t len;
    char s[]; /* NUL-terminated */
} jstr;

struct jlist;
struct jdict;
struct jfunc;
struct jmacro;
struct jloop;

typedef struct jv {
    uint8_t k;
    uint8_t safe; /* JK_STR: a Markup string (the |safe filter): '+' escapes plain strings */
    union {
        bool b;
        int64_t i;
        double f;
        jstr *s;
        struct jlist *l;
        struct jdict *d;
        struct jfunc *fn;
        struct jmacro *m;
        struct jloop *loop;
        const char *undef; /* name for "'x' is undefined" (may be NULL) */
    } u;
} jv;

/* JL_GROUP: a groupby result (grouper, list), a tuple with those two attributes */
enum { JL_TUPLE = 1, JL_GEN = 2, JL_CONSUMED = 4, JL_GROUP = 8 };

typedef struct jlist {
    size_t n, cap;
    jv *v;
    uint8_t flags;
} jlist;

typedef struct jdict {
    size_t n, cap;
    jv *keys, *vals;
    int which; /* JK_VIEW: 0 keys, 1 values, 2 items */
    uint32_t *index;          /* hash index of the string keys, or NULL (jinja_value.c) */
    size_t index_cap, indexed;
} jdict;

/* ---- AST ------------------------------------------------------------------------------------ */

typedef enum jnk {
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_CALL_BLOCK,
    N_FILTER_BLOCK, N_BREAK, N_CONTINUE,
    /* expressions */
    E_CONST, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER,
    E_TEST, E_NEG, E_POS, E_NOT, E_AND, E_OR, E_BINOP, E_COMPARE, E_CONCAT, E_COND,
} jnk;

typedef enum jop {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
} jop;

typedef struct jnode {
    jnk kind;
    int line;
    int op;                 /* jop, or for E_TEST: negated */
    const char *name;       /* E_NAME, E_ATTR, filter/test name, macro name, set target */
    jv value;               /* E_CONST */
    struct jnode *a, *b, *c;/* operands / condition, body, else / iterable, body, else */
    struct jnode **kids;    /* N_BODY statements, list items, call positional args, params */
    size_t n_kids;
    const char **kw_names;  /* call keyword arguments, dict keys are kids[2i] / kids[2i+1] */
    struct jnode **kw_vals;
    size_t n_kw;
    struct jnode *filter;   /* N_FOR: inline "if"; N_FILTER_BLOCK / N_SET_BLOCK filter chain */
    struct jnode *dyn_args, *dyn_kwargs; /* calls: f(*args, **kwargs) */
    bool recursive;         /* N_FOR */
    bool uses_varargs, uses_kwargs, uses_caller; /* N_MACRO */
} jnode;

/* ---- runtime ------------------------------------------------------------------------------ */

typedef struct jframe {
    struct jframe *parent;
    jdict vars;
} jframe;

typedef struct jmacro {
    const jnode *def;        /* N_MACRO, or the N_CALL_BLOCK whose body is the caller */
    jframe *closure;         /* frame the macro was defined in */
    struct jv caller;        /* the caller() a call block passes, or undefined */
    bool is_caller;
} jmacro;

typedef struct jloop {
    int64_t index0, length;
    jlist *items;
    int64_t depth0;
    const jnode *node;       /* N_FOR, for recursive loop(...) calls */
    jframe *frame;           /* frame the for statement runs in */
    jv cycle_args;           /* unused */
} jloop;

typedef enum jfid {
    /* globals */
    F_RANGE, F_NAMESPACE, F_DICT, F_RAISE, F_STRFTIME, F_CYCLER, F_JOINER, F_LIPSUM,
    /* bound methods (self in the jfunc) */
    F_METHOD,
    /* loop helpers */
    F_LOOP_CYCLE, F_LOOP_CALL, F_CYCLER_NEXT, F_CYCLER_RESET, F_JOINER_CALL,
} jfid;

typedef struct jfunc {
    jfid id;
    const char *name;        /* method name for F_METHOD */
    jv self;
} jfunc;

typedef struct jbuf {
    char *p;
    size_t n, cap;
} jbuf;

typedef struct jinterp {
    jarena arena;
    jmp_buf fail;
    sp_error *err;
    sp_status status;
    jbuf *out;               /* current output */
    jframe *root;
    int depth;               /* macro / recursion depth */
    uint64_t steps;
    uint64_t work;           /* bytes charged by jj_work since the last clock check */
    bool brk, cont;
    int loop_depth;
    double deadline_ms;
    const sp_jinja_options *opt;
    size_t out_total;
} jinterp;

/* ---- limits ---------------------------------------------------------------------------- */

#define JINJA_MAX_DEPTH 200          /* macro calls, recursive loops, nested renders */
#define JINJA_MAX_PARSE_DEPTH 200    /* nesting of expressions and blocks */
#define JINJA_MAX_VALUE_DEPTH 500    /* nesting of values compared, printed or serialized */
#define JINJA_MAX_RANGE 100000       /* as Jinja2's sandbox */
#define JINJA_MAX_STEPS 50000000ull
#define JINJA_MAX_OUTPUT (64u << 20)
#define JINJA_MAX_STRING (64u << 20)
#define JINJA_ARENA_LIMIT (256ull << 20)

/* ---- arena and errors (jinja_value.c) --------------------------------------------------- */

void *jj_alloc(jinterp *I, size_t n);
void jj_free_all(jarena *a);
_Noreturn void jj_fail(jinterp *I, sp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Called often: enforces the step and time budgets. */
void jj_tick(jinterp *I);
/* Charges `bytes` of work done by a loop over data (substring searches): enforces the
 * time budget without counting steps. */
void jj_work(jinterp *I, size_t bytes);

/* ---- integers ------------------------------------------------------------------------------ */

/* Python's integers are unbounded; specula's are int64. A result that does not fit is a
 * template error (SP_ERR_TEMPLATE, "integer overflow"), never a wrong number. `what` names
 * the operation in the message. */
_Noreturn void jj_int_overflow(jinterp *I, const char *what);
static inline int64_t jj_int_add(jinterp *I, int64_t a, int64_t b, const char *what)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        jj_int_overflow(I, what);
    return r;
}
static inline int64_t jj_int_sub(jinterp *I, int64_t a, int64_t b, const char *what)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        jj_int_overflow(I, what);
    return r;
}
static inline int64_t jj_int_mul(jinterp *I, int64_t a, int64_t b, const char *what)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        jj_int_overflow(I, what);
    return r;
}
static inline int64_t jj_int_neg(jinterp *I, int64_t a, const char *what)
{
    if (a == INT64_MIN)
        jj_int_overflow(I, what);
    return -a;
}
/* A float converted to an int as Python's int(x) does (truncation); NaN and infinities
 * are the caller's business. */
int64_t jj_int_from_double(jinterp *I, double x, const char *what);

/* ---- values (jinja_value.c) ---------------------------------------------------------------- */

static inline jv jj_undef(const char *name) { jv v = {.k = JK_UNDEF, .u = {.undef = name}}; return v; }
static inline jv jj_none(void) { jv v = {.k = JK_NONE, .u = {.i = 0}}; return v; }
static inline jv jj_bool(bool b) { jv v = {.k = JK_BOOL, .u = {.b = b}}; return v; }
static inline jv jj_int(int64_t i) { jv v = {.k = JK_INT, .u = {.i = i}}; return v; }
static inline jv jj_float(double f) { jv v = {.k = JK_FLOAT, .u = {.f = f}}; return v; }

jv jj_str(jinterp *I, const char *s, size_t n);
jv jj_cstr(jinterp *I, const char *s);
jv jj_list(jinterp *I, size_t cap, uint8_t flags);
void jj_list_push(jinterp *I, jlist *l, jv v);
jv jj_dict(jinterp *I, size_t cap);
void jj_dict_set(jinterp *I, jdict *d, jv key, jv val);
/* Lookup by string key; NULL when absent. */
jv *jj_dict_get_str(const jdict *d, const char *key, size_t len);
jv *jj_dict_get(jinterp *I, const jdict *d, jv key);

bool jj_truthy(jinterp *I, jv v);
bool jj_is_num(jv v);
double jj_num(jv v);
bool jj_equal(jinterp *I, jv a, jv b);
/* Python ordering: <0, 0, >0; fails with TypeError for incomparable types. */
int jj_compare(jinterp *I, jv a, jv b);
/* Stable merge sort of items by keys (parallel arrays), as Jinja2's sort: equal keys are
 * never ordered with '<'. */
void jj_sort_by(jinterp *I, jv *items, jv *keys, size_t n, bool reverse);
const char *jj_type_name(jv v);

/* str() and repr() into a buffer. */
void jj_buf_put(jinterp *I, jbuf *b, const char *s, size_t n);
void jj_buf_puts(jinterp *I, jbuf *b, const char *s);
void jj_write_str(jinterp *I, jbuf *b, jv v);
void jj_write_repr(jinterp *I, jbuf *b, jv v);
jv jj_to_str(jinterp *I, jv v);
/* markupsafe.escape (force: escape a Markup string too); the result is Markup. */
jv jj_html_escape(jinterp *I, jv s, bool force);

/* Iteration: materializes any iterable into a list (consuming generators). */
jlist *jj_iterate(jinterp *I, jv v, bool *ok);
/* len(); fails with TypeError when not sized. */
int64_t jj_len(jinterp *I, jv v);

/* Conversion from / to JSON. JSON numbers with '.' or an exponent become floats. */
jv jj_from_json_text(jinterp *I, const char *text, size_t n, const char *what);
void jj_tojson(jinterp *I, jbuf *b, jv v, const char *indent, const char *item_sep,
               const char *key_sep, bool sort_keys, bool ensure_ascii, int level);

/* UTF-8 helpers on strings. */
size_t jj_utf8_len(const char *s, size_t n);              /* code points */
bool jj_is_space(uint32_t cp);                       /* Python str.isspace */

/* ---- evaluation (jinja_eval.c) ------------------------------------------------------------ */

/* obj.attr (getattr first, then item) and obj[key] (item first, then attribute). */
jv jj_getattr(jinterp *I, jv obj, const char *name);
jv jj_getitem(jinterp *I, jv obj, jv key);
jv jj_binop(jinterp *I, int op, jv a, jv b);
/* Python's "needle in hay". */
bool jj_contains(jinterp *I, jv needle, jv hay);

/* ---- filters, tests, methods, globals ---------------------------------------------------- */

bool jj_filter_exists(const char *name);
bool jj_test_exists(const char *name);
jv jj_filter_apply(jinterp *I, const char *name, jv v, jv *args, size_t n_args,
                 const char **kw_names, jv *kw_vals, size_t n_kw, jframe *f);
bool jj_test_apply(jinterp *I, const char *name, jv v, jv *args, size_t n_args, jframe *f);
/* Bound method of a str / dict / list / namespace, or undefined when there is none. */
jv jj_method_get(jinterp *I, jv self, const char *name, bool *found);
jv jj_method_call(jinterp *I, jv self, const char *name, jv *args, size_t n_args,
                const char **kw_names, jv *kw_vals, size_t n_kw);
jv jj_global(const char *name, bool *found);
jv jj_global_call(jinterp *I, jfid id, jv *args, size_t n_args, const char **kw_names,
                jv *kw_vals, size_t n_kw);
/* str helpers shared by filters and methods: case mode 0 lower, 1 upper, 2 capitalize,
 * 3 str.title, 4 swapcase; pad where <0 left-justify, 0 center, >0 right-justify. */
jv jj_str_case(jinterp *I, jv s, int mode);
jv jj_str_strip(jinterp *I, jv s, jv chars, bool left, bool right);
jv jj_str_replace(jinterp *I, jv s, jv old, jv new_, int64_t count);
jv jj_str_pad(jinterp *I, jv s, int64_t width, uint32_t fill, int where);
/* Python's printf-style "fmt % args". */
jv jj_format_percent(jinterp *I, jv fmt, jv args);
/* A str method (jinja_str.c), called on s with the method name m. */
struct jargs;
jv jj_str_method(jinterp *I, jv s, const char *m, const struct jargs *A);
/* Fails with TypeError when a method that takes none is given keyword arguments. */
void jj_no_kwargs(jinterp *I, const struct jargs *A, const char *m);

/* A call's evaluated arguments (*args and **kwargs spread in): positional a[0..n),
 * keyword kn[i] = kv[i]. Filters, tests, methods and globals read them with jarg. */
typedef struct jargs {
    jv *a;
    size_t n;
    const char **kn;
    jv *kv;
    size_t nk;
} jargs;

/* Argument i by position, else by keyword `name` (NULL: positional only), else def. */
static inline jv jarg(const jargs *A, size_t i, const char *name, jv def)
{
    if (i < A->n)
        return A->a[i];
    for (size_t k = 0; name && k < A->nk; k++)
        if (!strcmp(A->kn[k], name))
            return A->kv[k];
    return def;
}

/* ---- parsing (jinja_lex.c / jinja_parse.c) ------------------------------------------------ */

typedef enum jtok {
    T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING,
    T_INT, T_FLOAT, T_OP,
} jtok;

typedef struct jtoken {
    jtok type;
    int line;
    const char *s; /* text, name, string value or operator (NUL-terminated, arena) */
    size_t len;
    int64_t i;
    double f;
} jtoken;

typedef struct jtokens {
    jtoken *v;
    size_t n, cap;
} jtokens;

/* Tokenizes src with transformers' settings (trim_blocks, lstrip_blocks, no trailing
 * newline). Text tokens already have whitespace control applied. */
void jj_lex(jinterp *I, const char *src, size_t n, const sp_jinja_syntax *syn, jtokens *out);
jnode *jj_parse(jinterp *I, const jtokens *toks);

struct sp_jinja_template {
    jinterp parse; /* holds the AST arena */
    jnode *root;
};

#endif
