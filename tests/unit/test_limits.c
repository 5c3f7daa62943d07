/* test_limits.c: lengths and sizes taken from callers and files stay within what the
 * context and memory can hold (issue 15's reproductions, each a regression test):
 * n_predict up to INT64_MAX with a buffer sized to the context, plain and speculative;
 * `specula diff` refusing directories, empty traces and out-of-range numbers; SP_ASSERT
 * staying on and naming the line. */
#include "test_util.h"
#include "diag/trace_diff.h"
#include "util/assert.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sp_generate and sp_generate_spec with n_predict = INT64_MAX (and 2^62, 2^40) write at
 * most n_ctx - n_prompt + 1 tokens: the buffer here is exactly that long, so ASan catches
 * one token too many, and speculation allocates nothing from n_predict. */
static void test_generate_huge_n_predict(void **state)
{
    (void)state;
    sp_model *m = open_fixture_model("llama_mha_bf16", 2);
    const int64_t n_ctx = 16;
    const int32_t prompt[] = {1, 2};
    const int64_t fit = n_ctx - 2 + 1;
    int64_t ns[] = {INT64_MAX, INT64_C(1) << 62, INT64_C(1) << 40, fit, fit + 1};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int spec = 0; spec < 3; spec++) {
            sp_error err = {0};
            sp_session *s = NULL, *d = NULL;
            sp_session_params sp = {.n_ctx = n_ctx};
            assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
            int32_t *out = malloc((size_t)fit * sizeof *out);
            sp_generate_params gp = {.n_predict = ns[i], .ignore_eos = true,
                                     .sampling = sp_sampling_default_params()};
            sp_generate_stats st;
            sp_status rc;
            if (!spec) {
                rc = sp_generate(s, prompt, 2, &gp, NULL, NULL, out, &st, &err);
            } else {
                if (spec == 1)
                    assert_int_equal(sp_session_new(m, &sp, &d, &err), SP_OK);
                sp_spec_params spp = {.kind = spec == 1 ? SP_DRAFT_SELF : SP_DRAFT_NGRAM, .draft = d,
                                      .k = 4};
                sp_spec_stats ss;
                rc = sp_generate_spec(s, prompt, 2, &gp, &spp, NULL, NULL, out, &st, &ss, &err);
            }
            if (rc != SP_OK)
                fail_msg("n_predict %lld, %s: %s", (long long)ns[i], spec ? "spec" : "plain", err.msg);
            assert_int_equal(st.n_generated, fit < ns[i] ? fit : ns[i]);
            assert_string_equal(st.stop_reason, ns[i] > fit ? "context" : "length");
            free(out);
            sp_session_free(d);
            sp_session_free(s);
        }
    sp_model_close(m);
}

/* A trace path that is a directory, an empty trace and numbers out of range are errors
 * (diff used to report "no divergence" for a directory; a cast of 1e300 to int64 is UB). */
static void test_trace_reader_rejects(void **state)
{
    (void)state;
    char *dir = make_temp_dir();
    sp_trace_file f;
    sp_error err = {0};
    assert_int_equal(sp_trace_read(dir, &f, &err), SP_ERR_IO);
    assert_non_null(strstr(err.msg, dir));
    assert_non_null(strstr(err.msg, "not a regular file"));
    write_text(dir, "empty.jsonl", "");
    char p[1200];
    snprintf(p, sizeof p, "%s/empty.jsonl", dir);
    assert_int_equal(sp_trace_read(p, &f, &err), SP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "no records"));
    const char *bad[] = {
        "{\"model\":\"target\",\"pass\":1e300,\"layer\":0,\"op\":\"embed\",\"position\":0,\"width\":4,\"hash\":\"0\"}\n",
        "{\"model\":\"target\",\"pass\":0,\"layer\":-1e20,\"op\":\"embed\",\"position\":0,\"width\":4,\"hash\":\"0\"}\n",
        "{\"model\":\"target\",\"pass\":0,\"layer\":0,\"op\":\"embed\",\"position\":0.5,\"width\":4,\"hash\":\"0\"}\n",
        "{\"model\":\"target\",\"pass\":0,\"layer\":0,\"op\":\"embed\",\"position\":0,\"width\":4,\"token\":3e9,\"hash\":\"0\"}\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(dir, "bad.jsonl", bad[i]);
        snprintf(p, sizeof p, "%s/bad.jsonl", dir);
        assert_int_equal(sp_trace_read(p, &f, &err), SP_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "not an integer in range"));
    }
    remove_tree(dir);
    free(dir);
}

/* SP_ASSERT is on in every build type and reports file:line before aborting (a child
 * process takes the abort). */
static void test_assert_reports_and_aborts(void **state)
{
    (void)state;
    char *dir = make_temp_dir();
    char log[1200];
    snprintf(log, sizeof log, "%s/stderr", dir);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!freopen(log, "w", stderr))
            _exit(99);
        int two = 2;
        SP_ASSERT(two == 2);
        SP_ASSERT(two + two == 5);
        _exit(0);
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGABRT);
    size_t n;
    char *text = read_all(log, &n);
    assert_non_null(strstr(text, "two + two == 5"));
    assert_non_null(strstr(text, "test_limits.c:"));
    free(text);
    remove_tree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_huge_n_predict),
        cmocka_unit_test(test_trace_reader_rejects),
        cmocka_unit_test(test_assert_reports_and_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
