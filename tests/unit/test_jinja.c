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
                NULL, SP_ERR_LIMIT, "", 10000);
    expect_fail("{{ ('x' * 1000000000) | length }}", NULL, SP_ERR_LIMIT, "string", 5000);
    expect_fail("{{ ([1] * 1000000000) | length }}", NULL, SP_ERR_LIMIT, "", 5000);
    expect_fail("{% set s = 'y' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", NULL,
                SP_ERR_LIMIT, "output", 10000);
    expect_fail("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", NULL, SP_ERR_LIMIT,
                "", 10000);
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
        cmocka_unit_test(test_chat_sources),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
