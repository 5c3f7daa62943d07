/* test_json.c: the JSON helpers under hostile input: the duplicate-key check of objects
 * is O(n log n) (it was quadratic: 40k keys took 2.5 s) and still finds the first key
 * that repeats; the pull scanner's errors name the line, column and byte; JSON text that
 * is not UTF-8 is an error. */
#include "test_util.h"
#include "util/json.h"
#include "util/json_scan.h"

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

static const char *dup_of(const char *text)
{
    static char key[64];
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    const char *d = sp_json_duplicate_key(j);
    snprintf(key, sizeof key, "%s", d ? d : "(none)");
    cJSON_Delete(j);
    return key;
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    assert_string_equal(dup_of("{}"), "(none)");
    assert_string_equal(dup_of("{\"a\": 1}"), "(none)");
    assert_string_equal(dup_of("{\"a\": 1, \"b\": 2, \"c\": 3}"), "(none)");
    assert_string_equal(dup_of("{\"a\": 1, \"a\": 2}"), "a");
    /* the first key (by position) that appears again, not the smallest */
    assert_string_equal(dup_of("{\"z\": 1, \"b\": 2, \"b\": 3, \"z\": 4}"), "z");
    assert_string_equal(dup_of("{\"q\": 1, \"m\": 1, \"a\": 2, \"m\": 3, \"a\": 4, \"m\": 5}"), "m");
    assert_string_equal(dup_of("[1, 2]"), "(none)");
    /* 200k distinct keys, then the same with one repeat at the end: fast either way */
    size_t n = 200000;
    char *text = malloc(n * 20 + 64), *p = text;
    p += sprintf(p, "{");
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s\"key%zu\": %zu", i ? ", " : "", i, i);
    strcpy(p, "}");
    double t0 = now_ms();
    assert_string_equal(dup_of(text), "(none)");
    strcpy(p, ", \"key123456\": 0}");
    assert_string_equal(dup_of(text), "key123456");
    double ms = now_ms() - t0;
    free(text);
    /* quadratic took minutes here; sorted is milliseconds (generous for ASan under load) */
    if (ms > 20000)
        fail_msg("duplicate-key check of %zu keys took %.0f ms", n, ms);
}

static void test_scan_positions(void **state)
{
    (void)state;
    sp_error err = {0};
    sp_jscan j;
    const char *text = "{\n  \"a\": [1,\n   2 3]}";
    sp_jscan_init(&j, text, strlen(text), "x.json", &err);
    assert_false(sp_jscan_skip(&j));
    assert_non_null(strstr(err.msg, "x.json: malformed JSON at line 3, column 6 (byte 18)"));
    text = "\"\xc3\xa9\xc3\xa9\\q\"";
    sp_jscan_init(&j, text, strlen(text), "y.json", &err);
    char *buf = NULL;
    size_t cap = 0, len;
    assert_false(sp_jscan_string(&j, &buf, &cap, &len));
    assert_non_null(strstr(err.msg, "line 1, column 6 (byte 7)")); /* columns count code points */
    free(buf);
}

/* JSON text must be UTF-8: cJSON copied invalid bytes of strings into the values, so an
 * added token of a tokenizer.json could make the "complete UTF-8" detokenizer emit
 * invalid UTF-8 (fuzz_tokenizer found it). The error names the file and the byte. */
static void test_parse_rejects_invalid_utf8(void **state)
{
    (void)state;
    sp_error err = {0};
    cJSON *j = NULL;
    const char *ok = "{\"content\": \"[UN\xc2\xb1]\"}";
    assert_int_equal(sp_json_parse(ok, strlen(ok), "t.json", &j, &err), SP_OK);
    cJSON_Delete(j);
    const char *bad[] = {"{\"content\": \"[UN\xb1]\"}", "{\"a\": 1}\xff", "{\"a\": \"\xed\xa0\x80\"}",
                         "{\"a\": \"\xc0\xaf\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = NULL;
        assert_int_equal(sp_json_parse(bad[i], strlen(bad[i]), "t.json", &j, &err), SP_ERR_FORMAT);
        assert_null(j);
        assert_non_null(strstr(err.msg, "t.json: not valid UTF-8 (byte "));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_scan_positions),
        cmocka_unit_test(test_parse_rejects_invalid_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
