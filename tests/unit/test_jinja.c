/* test_jinja.c: what the template differential test cannot show: a hostile template
 * (endless loops, runaway recursion, huge ranges, string and list bombs, deep nesting,
 * unsafe mutation) gets a clear error within its budgets and never a hang or a crash;
 * syntax errors name the line; values survive the JSON round trip exactly (U+0000,
 * big integers, 1.0); and chat template sources resolve as transformers resolves them. */
#include "test_util.h"
#include "text/jinja/chat.h"
#include "text/jinja/jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Renders src with ctx; returns the status, *out (malloc'd) on success. */
static sp_status render(const char *src, const char *ctx, const sp_jinja_options *opt,
                        char **out, sp_error *err)
{
    sp_jinja_template *t;
    *out = NULL;
    sp_status st = sp_jinja_compile(src, strlen(src), &t, err);
    if (st != SP_OK)
        return st;
    st = sp_jinja_render(t, NULL, 0, ctx, ctx ? strlen(ctx) : 0, opt, out, NULL, err);
    sp_jinja_free(t);
    return st;
}

static void expect_ok(const char *src, const char *ctx, const char *want)
{
    char *out;
    sp_error err = {0};
    sp_status st = render(src, ctx, NULL, &out, &err);
    if (st != SP_OK)
        fail_msg("%s: %s", src, err.msg);
    assert_string_equal(out, want);
    free(out);
}

/* Expects the status and a message containing needle, within max_ms. */
static void expect_fail(const char *src, const char *ctx, sp_status want, const char *needle,
                        double max_ms)
{
    char *out;
    sp_error err = {0};
    double t0 = now_ms();
    sp_status st = render(src, ctx, NULL, &out, &err);
    double ms = now_ms() - t0;
    if (st == SP_OK) {
        free(out);
        fail_msg("rendered a template that must fail: %s", src);
    }
    if (st != want || !strstr(err.msg, needle))
        fail_msg("%s: status %d message '%s'; expected %d with '%s'", src, st, err.msg, want, needle);
    if (ms > max_ms)
        fail_msg("%s: took %.0f ms to fail (limit %.0f)", src, ms, max_ms);
}

static void test_hostile_templates(void **state)
{
    (void)state;
    /* Bounds are wall-clock and generous: the 10 s time budget itself is wall-clock, and a
     * loaded machine running the ASan suite stretches a 0.4 s CPU render past 10 s. */
    /* 10^10 iterations: stopped by the step or memory budget */
    expect_fail("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                NULL, SP_ERR_LIMIT, "", 30000);
    expect_fail("{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}",
                NULL, SP_ERR_LIMIT, "", 30000);
    expect_fail("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, SP_ERR_LIMIT,
                "recursion", 5000);
    expect_fail("{% for n in xs recursive %}{{ loop(xs) }}{% endfor %}", "{\"xs\": [1]}",
                SP_ERR_LIMIT, "recursion", 5000);
    expect_fail("{{ range(1000000000) | list | length }}", NULL, SP_ERR_LIMIT, "Range too big", 5000);
    expect_fail("{% set ns = namespace(s='abcdefgh') %}{% for i in range(40) %}"
                "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
                NULL, SP_ERR_LIMIT, "", 30000);
    expect_fail("{{ ('x' * 1000000000) | length }}", NULL, SP_ERR_LIMIT, "string", 5000);
    expect_fail("{{ ([1] * 1000000000) | length }}", NULL, SP_ERR_LIMIT, "", 5000);
    expect_fail("{% set s = 'y' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", NULL,
                SP_ERR_LIMIT, "output", 30000);
    expect_fail("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", NULL, SP_ERR_LIMIT,
                "", 30000);
    /* ImmutableSandboxedEnvironment: no mutation of lists and dicts */
    expect_fail("{% set xs = [] %}{{ xs.append(1) }}", NULL, SP_ERR_TEMPLATE, "unsafe", 1000);
    expect_fail("{% set d = {} %}{{ d.update({'a': 1}) }}", NULL, SP_ERR_TEMPLATE, "unsafe", 1000);
    expect_fail("{{ raise_exception('no system role') }}", NULL, SP_ERR_TEMPLATE, "no system role", 1000);
}

static void test_deep_nesting(void **state)
{
    (void)state;
    size_t n = 100000;
    char *src = malloc(2 * n + 16);
    size_t o = 0;
    o += (size_t)sprintf(src, "{{ ");
    for (size_t i = 0; i < n; i++)
        src[o++] = '(';
    src[o++] = '1';
    for (size_t i = 0; i < n; i++)
        src[o++] = ')';
    strcpy(src + o, " }}");
    sp_jinja_template *t = NULL;
    sp_error err = {0};
    assert_int_equal(sp_jinja_compile(src, strlen(src), &t, &err), SP_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "nested"));
    o = 0;
    for (size_t i = 0; i < 5000; i++)
        o += (size_t)sprintf(src + o, "{%% if 1 %%}");
    src[o] = '\0';
    assert_int_equal(sp_jinja_compile(src, strlen(src), &t, &err), SP_ERR_LIMIT);
    free(src);
}

static void test_time_limit(void **state)
{
    (void)state;
    const char *src = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    sp_jinja_options opt = {.time_limit_ms = 50};
    char *out;
    sp_error err = {0};
    double t0 = now_ms();
    assert_int_equal(render(src, NULL, &opt, &out, &err), SP_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "time limit"));
    assert_true(now_ms() - t0 < 2000);
}

static void test_syntax_errors(void **state)
{
    (void)state;
    expect_fail("line one\n{% if x %}\nunclosed", NULL, SP_ERR_TEMPLATE, "line", 1000);
    expect_fail("a\nb\n{{ 1 + }}", NULL, SP_ERR_TEMPLATE, "line 3", 1000);
    expect_fail("{{ x | no_such_filter }}", NULL, SP_ERR_TEMPLATE, "no filter named 'no_such_filter'", 1000);
    expect_fail("{% if x is no_such_test %}{% endif %}", NULL, SP_ERR_TEMPLATE, "no test named", 1000);
    expect_fail("{% endfor %}", NULL, SP_ERR_TEMPLATE, "endfor", 1000);
    expect_fail("{{ 'unterminated }}", NULL, SP_ERR_TEMPLATE, "", 1000);
    expect_fail("{% raw %}never closed", NULL, SP_ERR_TEMPLATE, "endraw", 1000);
    expect_fail("{# never closed", NULL, SP_ERR_TEMPLATE, "#}", 1000);
    expect_fail("{{ x }}", "[1, 2]", SP_ERR_FORMAT, "JSON object", 1000);
    expect_fail("{{ x }}", "{\"x\": ", SP_ERR_FORMAT, "", 1000);
}

static void test_values_exact(void **state)
{
    (void)state;
    /* U+0000 inside strings survives context -> output */
    char *out;
    size_t n;
    sp_error err = {0};
    sp_jinja_template *t;
    const char *src = "[{{ s }}]{{ s | length }}";
    assert_int_equal(sp_jinja_compile(src, strlen(src), &t, &err), SP_OK);
    const char *ctx = "{\"s\": \"a\\u0000b\"}";
    assert_int_equal(sp_jinja_render(t, NULL, 0, ctx, strlen(ctx), NULL, &out, &n, &err), SP_OK);
    assert_int_equal(n, 6);
    assert_memory_equal(out, "[a\0b]3", 6);
    free(out);
    sp_jinja_free(t);
    expect_ok("{{ a }} {{ b }} {{ c }} {{ a is integer }} {{ b is float }}",
              "{\"a\": 9007199254740993, \"b\": 1.0, \"c\": 1e300}",
              "9007199254740993 1.0 1e+300 True True");
    expect_ok("{{ d | tojson }}", "{\"d\": {\"z\": 1, \"a\": [1.5, null, true, \"\\u00e9\"]}}",
              "{\"z\": 1, \"a\": [1.5, null, true, \"\xc3\xa9\"]}");
    /* defaults: overridden by the context */
    sp_jinja_var defs[] = {{"x", SP_JVAR_STR, "default", false}, {"y", SP_JVAR_BOOL, NULL, true},
                           {"z", SP_JVAR_JSON, "[1, {\"k\": null}]", false}};
    src = "{{ x }} {{ y }} {{ z }}";
    assert_int_equal(sp_jinja_compile(src, strlen(src), &t, &err), SP_OK);
    ctx = "{\"x\": \"ctx\"}";
    assert_int_equal(sp_jinja_render(t, defs, 3, ctx, strlen(ctx), NULL, &out, &n, &err), SP_OK);
    assert_string_equal(out, "ctx True [1, {'k': None}]");
    free(out);
    sp_jinja_free(t);
}

static void test_strftime_now(void **state)
{
    (void)state;
    sp_jinja_options opt = {.now = "2024-02-29T23:05:09"};
    char *out;
    sp_error err = {0};
    assert_int_equal(render("{{ strftime_now('%d %b %Y %H:%M:%S %A %j') }}", NULL, &opt, &out, &err), SP_OK);
    assert_string_equal(out, "29 Feb 2024 23:05:09 Thursday 060");
    free(out);
    opt.now = "not a date";
    assert_int_equal(render("{{ strftime_now('%Y') }}", NULL, &opt, &out, &err), SP_ERR_INVALID_ARG);
}

/* Python's ints are unbounded, specula's are int64: a result beyond int64 is a clear
 * template error, never a wrong number or a trap (INT64_MIN // -1 raised SIGFPE). */
static void test_int_edges(void **state)
{
    (void)state;
#define MIN "(-9223372036854775807 - 1)"
#define MAX "9223372036854775807"
    expect_ok("{{ " MIN " }} {{ " MIN " % -1 }} {{ 7 // -1 }} {{ -7 % -1 }} {{ " MAX " // -1 }}", NULL,
              "-9223372036854775808 0 -7 0 -9223372036854775807");
    expect_fail("{{ " MIN " // -1 }}", NULL, SP_ERR_TEMPLATE, "integer overflow in //", 1000);
    expect_fail("{{ -" MIN " }}", NULL, SP_ERR_TEMPLATE, "integer overflow", 1000);
    expect_fail("{{ " MIN " | abs }}", NULL, SP_ERR_TEMPLATE, "integer overflow in abs", 1000);
    expect_fail("{{ " MAX " + 1 }}", NULL, SP_ERR_TEMPLATE, "integer overflow in +", 1000);
    expect_fail("{{ " MIN " - 1 }}", NULL, SP_ERR_TEMPLATE, "integer overflow in -", 1000);
    expect_fail("{{ " MAX " * 2 }}", NULL, SP_ERR_TEMPLATE, "integer overflow in *", 1000);
    expect_fail("{{ 3 ** 41 }}", NULL, SP_ERR_TEMPLATE, "integer overflow in **", 1000);
    expect_fail("{{ [" MAX ", 1] | sum }}", NULL, SP_ERR_TEMPLATE, "integer overflow", 1000);
    expect_fail("{{ 1e300 | int }}", NULL, SP_ERR_TEMPLATE, "integer overflow in int", 1000);
    expect_fail("{{ '99999999999999999999' | int }}", NULL, SP_ERR_TEMPLATE, "integer overflow", 1000);
    expect_fail("{{ 9223372036854775808 }}", NULL, SP_ERR_TEMPLATE, "64 bits", 1000);
    expect_fail("{{ 0xfffffffffffffffff }}", NULL, SP_ERR_TEMPLATE, "64 bits", 1000);
    expect_fail("{{ x }}", "{\"x\": 123456789012345678901234}", SP_ERR_FORMAT, "64 bits", 1000);
    /* ranges over the whole int64 span: counted without overflow, then refused */
    expect_fail("{{ range(" MIN ", " MAX ") | length }}", NULL, SP_ERR_LIMIT, "Range too big", 1000);
    expect_fail("{{ range(" MAX ", " MIN ", -1) | length }}", NULL, SP_ERR_LIMIT, "Range too big", 1000);
    expect_ok("{{ range(0, " MAX ", " MAX ") | list }} {{ range(" MAX ", " MIN ", " MIN ") | list }}",
              NULL, "[0] [9223372036854775807, -1]");
    /* slices with huge steps, truncate and zfill with extreme widths */
    expect_ok("{{ [1, 2, 3][::" MIN "] }} {{ [1, 2, 3][::" MAX "] }} {{ 'abc'[" MIN ":" MAX "] }}",
              NULL, "[3] [1] abc");
    expect_ok("{{ 'abc def' | truncate(" MAX ", leeway=" MAX ") }}", NULL, "abc def");
    expect_ok("{{ '-5'.zfill(" MIN ") }}", NULL, "-5");
    expect_fail("{{ [1] * " MAX " }}", NULL, SP_ERR_LIMIT, "too long", 1000);
#undef MIN
#undef MAX
}

/* Builds "{{ head" + n * link + " }}". */
static char *chain(const char *head, const char *link, size_t n)
{
    size_t ll = strlen(link), o = 0;
    char *s = malloc(strlen(head) + n * ll + 16);
    o += (size_t)sprintf(s, "{{ %s", head);
    for (size_t i = 0; i < n; i++, o += ll)
        memcpy(s + o, link, ll);
    strcpy(s + o, " }}");
    return s;
}

/* Long flat chains parse in loops but evaluate recursively, one frame per link: they are
 * refused at compile time like deep nesting (they overflowed the stack). */
static void test_flat_chains(void **state)
{
    (void)state;
    struct { const char *head, *link; size_t n; } cases[] = {
        {"1", " + 1", 200000}, {"'A'", " | lower", 100000}, {"x", ".x", 50000},
        {"x", "[0]", 50000},   {"x", "()", 50000},          {"1", " * 1", 100000},
        {"1", " ** 1", 100000}, {"1", " < 2", 100000},      {"x", " and x", 100000},
        {"x", " or x", 100000}, {"x", " if x else x", 50000}, {"x", " is defined", 50000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *src = chain(cases[i].head, cases[i].link, cases[i].n);
        sp_jinja_template *t = NULL;
        sp_error err = {0};
        if (sp_jinja_compile(src, strlen(src), &t, &err) != SP_ERR_LIMIT)
            fail_msg("chain of '%s' x %zu: expected a limit error, got '%s'", cases[i].link, cases[i].n, err.msg);
        assert_non_null(strstr(err.msg, "levels deep"));
        free(src);
    }
    char *src = chain("1", " + 1", 150); /* ordinary lengths still work */
    expect_ok(src, NULL, "151");
    free(src);
    src = chain("'A'", " | lower", 100);
    expect_ok(src, NULL, "a");
    free(src);
}

/* `ns.l = [ns.l, ns.l]` doubles the tree each time: comparing, sorting, printing or
 * serializing it is exponential and used to escape the time budget. */
static void test_shared_values_budget(void **state)
{
    (void)state;
#define BUILD(v) "{% set " v " = namespace(l=[1]) %}{% for i in range(60) %}{% set " v ".l = [" v ".l, " v ".l] %}{% endfor %}"
    const char *ops[] = {"{{ a.l == b.l }}", "{{ a.l < b.l }}", "{{ a.l in [b.l] }}",
                         "{{ [a.l, b.l] | sort | length }}", "{{ [a.l, b.l] | unique | list | length }}",
                         "{{ a.l | tojson | length }}", "{{ a.l | string | length }}",
                         "{{ a.l | pprint | length }}", "{{ {'k': a.l} == {'k': b.l} }}",
                         "{{ [a.l, b.l] | max | length }}"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        char src[1024];
        strcat(strcpy(src, BUILD("a") BUILD("b")), ops[i]);
        char *out = NULL;
        sp_error err = {0};
        sp_jinja_options opt = {.time_limit_ms = 500};
        double t0 = now_ms();
        sp_status st = render(src, NULL, &opt, &out, &err);
        double ms = now_ms() - t0;
        free(out);
        if (st != SP_ERR_LIMIT || ms > 8000)
            fail_msg("%s: status %d '%s' after %.0f ms", ops[i], st, err.msg, ms);
    }
#undef BUILD
    /* identical items compare by identity first, as in Python: no walk at all */
    expect_ok("{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}"
              "{% endfor %}{{ [ns.l] == [ns.l] }} {{ ns.l in [ns.l] }}", NULL, "True True");
    /* values nested deeper than Python's recursion limit */
    expect_fail("{% set ns = namespace(l=[1]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}"
                "{% endfor %}{{ ns.l == [ns.l] }}", NULL, SP_ERR_LIMIT, "nested deeper", 5000);
    expect_fail("{% set ns = namespace(l=[1]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}"
                "{% endfor %}{{ ns.l | string }}", NULL, SP_ERR_LIMIT, "nested deeper", 5000);
    /* quadratic substring searches are charged to the time budget */
    sp_jinja_options opt = {.time_limit_ms = 300};
    char *out = NULL;
    sp_error err = {0};
    double t0 = now_ms();
    assert_int_equal(render("{{ ('a' * 3000000 + 'b') in ('a' * 6000000) }}", NULL, &opt, &out, &err),
                     SP_ERR_LIMIT);
    assert_true(now_ms() - t0 < 8000);
    t0 = now_ms();
    assert_int_equal(render("{{ ('a' * 6000000).replace('a' * 3000000 + 'b', '') }}", NULL, &opt, &out, &err),
                     SP_ERR_LIMIT);
    assert_true(now_ms() - t0 < 8000);
    /* sort_keys over many keys is O(n log n) (it was an insertion sort) */
    size_t n_keys = 20000;
    char *ctx = malloc(n_keys * 24 + 32), *p = ctx;
    p += sprintf(p, "{\"d\": {");
    for (size_t i = 0; i < n_keys; i++)
        p += sprintf(p, "%s\"k%05zu\": %zu", i ? ", " : "", n_keys - 1 - i, i);
    strcpy(p, "}}");
    t0 = now_ms();
    expect_ok("{{ (d | tojson(sort_keys=true))[:24] }}", ctx, "{\"k00000\": 19999, \"k0000");
    free(ctx);
    assert_true(now_ms() - t0 < 20000);
}

/* Dict lookups are hashed once a dict has 16 keys: a context object with 200k keys was
 * quadratic to build (10^10 key comparisons, no budget checks). */
static void test_big_dicts(void **state)
{
    (void)state;
    size_t n = 200000;
    char *ctx = malloc(n * 24 + 32), *p = ctx;
    p += sprintf(p, "{\"d\": {");
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s\"k%zu\": %zu", i ? ", " : "", i, i);
    strcpy(p, ", \"k7\": -7}}"); /* a repeated key: the later value wins, in place */
    double t0 = now_ms();
    expect_ok("{{ d | length }} {{ d.k199999 }} {{ d['k7'] }} {{ d.get('nope', 'x') }} {{ (d | list)[7] }}",
              ctx, "200000 199999 -7 x k7");
    double ms = now_ms() - t0;
    free(ctx);
    if (ms > 20000) /* quadratic: minutes; hashed: under a second (more under ASan) */
        fail_msg("a context of %zu keys took %.0f ms", n, ms);
    /* views taken before later insertions still answer for their own keys only */
    expect_ok("{% set ns = namespace() %}{% for i in range(40) %}{% set ns.x = i %}{% endfor %}"
              "{% set d = dict(a=1, b=2, c=3, d=4, e=5, f=6, g=7, h=8, i=9, j=10, k=11, l=12, m=13, "
              "n=14, o=15, p=16, q=17) %}{{ d.q }} {{ d.a }} {{ 'q' in d }} {{ 'z' in d }} {{ ns.x }}",
              NULL, "17 1 True False 39");
}

/* A context that is not JSON names the position (it said only "format error"). */
static void test_context_errors(void **state)
{
    (void)state;
    expect_fail("{{ x }}", "{\"x\": [1, 2,\n 3 x", SP_ERR_FORMAT, "chat context: malformed JSON at line 2, column 4", 1000);
    expect_fail("{{ x }}", "{\"x\": [1, 2,}", SP_ERR_FORMAT, "line 1, column 13 (byte 12)", 1000);
    expect_fail("{{ x }}", "{\"x\": 1} 2", SP_ERR_FORMAT, "trailing data", 1000);
    expect_fail("{{ x }}", "{\"x\": \"\xff\"}", SP_ERR_FORMAT, "UTF-8", 1000);
    sp_jinja_template *t;
    sp_error err = {0};
    char *out;
    assert_int_equal(sp_jinja_compile("{{ x }}", 7, &t, &err), SP_OK);
    /* the message survives with no error struct to copy through (it was lost) */
    assert_int_equal(sp_jinja_render(t, NULL, 0, "{\"x\": [}", 8, NULL, &out, NULL, NULL), SP_ERR_FORMAT);
    sp_jinja_free(t);
}

/* A model directory: tokenizer_config.json with named templates and special tokens. */
static void test_chat_sources(void **state)
{
    (void)state;
    char *dir = make_temp_dir();
    write_text(dir, "tokenizer_config.json",
               "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\","
               " \"pad_token\": null, \"extra_special_tokens\": {\"image_token\": \"<img>\"},"
               " \"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ bos_token }}{{ eos_token }}"
               "{{ image_token }}{{ pad_token is defined }}{{ tools }}{{ add_generation_prompt }}\"},"
               " {\"name\": \"tool_use\", \"template\": \"T{{ tools | length }}\"}]}");
    char ctx_file[600];
    sp_chat *c;
    sp_error err = {0};
    assert_int_equal(sp_chat_open(dir, &c, &err), SP_OK);
    char *out;
    size_t n;
    const char *ctx = "{\"messages\": []}";
    assert_int_equal(sp_chat_render(c, ctx, strlen(ctx), NULL, &out, &n, &err), SP_OK);
    assert_string_equal(out, "D<s></s><img>FalseNoneFalse");
    free(out);
    ctx = "{\"messages\": [], \"tools\": [1, 2], \"eos_token\": \"E\"}";
    assert_int_equal(sp_chat_render(c, ctx, strlen(ctx), NULL, &out, &n, &err), SP_OK);
    assert_string_equal(out, "T2");
    free(out);
    ctx = "{\"messages\": [], \"tools\": null, \"eos_token\": \"E\"}";
    assert_int_equal(sp_chat_render(c, ctx, strlen(ctx), NULL, &out, &n, &err), SP_OK);
    assert_string_equal(out, "D<s>E<img>FalseNoneFalse");
    free(out);
    sp_chat_close(c);
    /* chat_template.jinja takes priority over the config's template */
    write_text(dir, "chat_template.jinja", "J{{ bos_token }}\n");
    assert_int_equal(sp_chat_open(dir, &c, &err), SP_OK);
    assert_int_equal(sp_chat_render(c, "{}", 2, NULL, &out, &n, &err), SP_OK);
    assert_string_equal(out, "J<s>");
    free(out);
    sp_chat_close(c);
    /* no template anywhere */
    write_text(dir, "chat_template.jinja", "");
    remove(strcat(strcpy(ctx_file, dir), "/chat_template.jinja"));
    write_text(dir, "tokenizer_config.json", "{\"eos_token\": \"</s>\"}");
    assert_int_equal(sp_chat_open(dir, &c, &err), SP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "no chat template"));
    write_text(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": 3}]}");
    assert_int_equal(sp_chat_open(dir, &c, &err), SP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "chat_template"));
    write_text(dir, "tokenizer_config.json", "{\"chat_template\": \"{% if %}\"}");
    assert_int_equal(sp_chat_open(dir, &c, &err), SP_OK);
    assert_int_equal(sp_chat_render(c, "{}", 2, NULL, &out, &n, &err), SP_ERR_TEMPLATE);
    sp_chat_close(c);
    remove_tree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_templates), cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_time_limit),        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_values_exact),      cmocka_unit_test(test_strftime_now),
        cmocka_unit_test(test_chat_sources),      cmocka_unit_test(test_int_edges),
        cmocka_unit_test(test_flat_chains),       cmocka_unit_test(test_shared_values_budget),
        cmocka_unit_test(test_context_errors),    cmocka_unit_test(test_big_dicts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
