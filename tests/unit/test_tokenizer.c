/* test_tokenizer.c: tokenizer behaviour that the differential test cannot show: clear
 * errors on malformed tokenizer.json files and bad input, regex resource limits, and the
 * streaming detokenizer (only complete UTF-8, same text as a full decode). */
#include "test_util.h"
#include "text/tok/regex.h"
#include "text/tok/tokenizer.h"
#include "util/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A small byte-level BPE tokenizer: vocabulary of the printable ASCII byte-level
 * characters plus a few merges. */
static char *tiny_json(const char *extra_model, const char *merges, const char *added)
{
    static char buf[65536];
    char vocab[16384];
    size_t o = 0;
    o += (size_t)snprintf(vocab + o, sizeof vocab - o, "{");
    int id = 0;
    for (int c = 0x21; c <= 0x7e; c++) {
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(vocab + o, sizeof vocab - o, "%s\"\\%c\":%d", id ? "," : "", c, id);
        else
            o += (size_t)snprintf(vocab + o, sizeof vocab - o, "%s\"%c\":%d", id ? "," : "", c, id);
        id++;
    }
    o += (size_t)snprintf(vocab + o, sizeof vocab - o, ",\"\\u0120\":%d,\"he\":%d,\"ll\":%d,\"hell\":%d,"
                          "\"hello\":%d}", id, id + 1, id + 2, id + 3, id + 4);
    snprintf(buf, sizeof buf,
             "{\"version\":\"1.0\",\"added_tokens\":[%s],\"normalizer\":null,"
             "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
             "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
             "\"model\":{\"type\":\"BPE\"%s,\"vocab\":%s,\"merges\":%s}}",
             added ? added : "", extra_model ? extra_model : "", vocab,
             merges ? merges : "[\"h e\",\"l l\",\"he ll\",\"hell o\"]");
    return buf;
}

static sp_status open_text(const char *json, sp_tokenizer **t, sp_error *err)
{
    char *dir = make_temp_dir();
    write_text(dir, "tokenizer.json", json);
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    sp_status st = sp_tokenizer_open(p, t, err);
    remove_tree(dir);
    free(dir);
    return st;
}

static void expect_load_error(const char *json, sp_status want, const char *needle)
{
    sp_tokenizer *t = NULL;
    sp_error err = {0};
    sp_status st = open_text(json, &t, &err);
    if (st == SP_OK) {
        sp_tokenizer_close(t);
        fail_msg("loaded a bad tokenizer; expected '%s'", needle);
    }
    if (st != want)
        fail_msg("status %s, expected %s: %s", sp_status_name(st), sp_status_name(want), err.msg);
    if (!strstr(err.msg, needle))
        fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_tiny_tokenizer_works(void **state)
{
    (void)state;
    sp_tokenizer *t;
    sp_error err = {0};
    if (open_text(tiny_json(NULL, NULL, NULL), &t, &err) != SP_OK)
        fail_msg("%s", err.msg);
    int32_t *ids;
    size_t n;
    assert_int_equal(sp_tokenizer_encode(t, "hello hi", 8, false, &ids, &n, &err), SP_OK);
    assert_int_equal(n, 4); /* hello, Ġ, h, i */
    assert_int_equal(ids[0], 98);
    char *text;
    size_t len;
    assert_int_equal(sp_tokenizer_decode(t, ids, n, false, &text, &len, &err), SP_OK);
    assert_string_equal(text, "hello hi");
    free(text);
    free(ids);
    /* invalid UTF-8 input, out-of-range ids */
    assert_int_equal(sp_tokenizer_encode(t, "a\xff", 2, false, &ids, &n, &err), SP_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "not valid UTF-8 (byte 1)"));
    int32_t bad[2] = {1, 99999};
    assert_int_equal(sp_tokenizer_decode(t, bad, 2, false, &text, &len, &err), SP_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "token id 99999 at position 1 is outside the vocabulary"));
    bad[1] = -4;
    assert_int_equal(sp_tokenizer_decode(t, bad, 2, false, &text, &len, &err), SP_ERR_INVALID_ARG);
    sp_tokenizer_close(t);
}

static void test_malformed_files(void **state)
{
    (void)state;
    expect_load_error("{\"model\": ", SP_ERR_FORMAT, "malformed JSON");
    expect_load_error("[1, 2]", SP_ERR_FORMAT, "expected '{'");
    expect_load_error(tiny_json(NULL, "[\"h e\",\"x q\"]", NULL), SP_ERR_FORMAT,
                      "model.merges[1]: merge 'x' + 'q' names a token that is not in the vocabulary");
    expect_load_error(tiny_json(NULL, "[\"h e\",\"he\"]", NULL), SP_ERR_FORMAT,
                      "model.merges[1]: 'he' is not 'a b'");
    expect_load_error(tiny_json(",\"unk_token\":\"<nope>\"", NULL, NULL), SP_ERR_FORMAT,
                      "unk_token '<nope>' is not in the vocabulary");
    /* unknown component types */
    char buf[70000];
    const char *base = tiny_json(NULL, NULL, NULL);
    const char *at = strstr(base, "\"normalizer\":null");
    snprintf(buf, sizeof buf, "%.*s\"normalizer\":{\"type\":\"Precompiled\"}%s", (int)(at - base),
             base, at + strlen("\"normalizer\":null"));
    expect_load_error(buf, SP_ERR_UNSUPPORTED, "normalizer type 'Precompiled' is not supported");
    at = strstr(base, "\"decoder\":{\"type\":\"ByteLevel\"}");
    snprintf(buf, sizeof buf, "%.*s\"decoder\":{\"type\":\"CTC\"}%s", (int)(at - base), base,
             at + strlen("\"decoder\":{\"type\":\"ByteLevel\"}"));
    expect_load_error(buf, SP_ERR_UNSUPPORTED, "decoder type 'CTC' is not supported");
    at = strstr(base, "\"type\":\"BPE\"");
    snprintf(buf, sizeof buf, "%.*s\"type\":\"Unigram\"%s", (int)(at - base), base,
             at + strlen("\"type\":\"BPE\""));
    expect_load_error(buf, SP_ERR_UNSUPPORTED, "model type 'Unigram' is not supported");
    /* a vocabulary with duplicate ids or names */
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}",
                      SP_ERR_FORMAT, "id 0 is used by both 'a' and 'b'");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"a\":1},\"merges\":[]}}",
                      SP_ERR_FORMAT, "token 'a' appears twice");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}",
                      SP_ERR_FORMAT, "outside");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1.5},\"merges\":[]}}",
                      SP_ERR_FORMAT, "expected an integer");
    /* a post-processor naming an id outside the vocabulary */
    at = strstr(base, "\"post_processor\":null");
    snprintf(buf, sizeof buf,
             "%.*s\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
             "{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
             "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[5000],\"tokens\":[\"<s>\"]}}}%s",
             (int)(at - base), base, at + strlen("\"post_processor\":null"));
    expect_load_error(buf, SP_ERR_FORMAT, "id 5000 is outside the vocabulary");
    /* a regex that does not compile */
    at = strstr(base, "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}");
    snprintf(buf, sizeof buf,
             "%.*s\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},\"behavior\":"
             "\"Isolated\"}%s",
             (int)(at - base), base,
             at + strlen("\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}"));
    expect_load_error(buf, SP_ERR_FORMAT, "regex '(a'");
    sp_tokenizer *t;
    sp_error err = {0};
    assert_int_equal(sp_tokenizer_open("/nonexistent/tokenizer.json", &t, &err), SP_ERR_IO);
    /* an added token that is not UTF-8 would reach decoded text (fuzz_tokenizer) */
    expect_load_error(tiny_json(NULL, NULL, "{\"id\":0,\"content\":\"[UN\xb1]\",\"special\":true}"),
                      SP_ERR_FORMAT, "tokenizer.json: not valid UTF-8 (byte ");
}

static void test_hostile_regex_is_bounded(void **state)
{
    (void)state;
    sp_regex *re;
    sp_error err = {0};
    const char *pat = "(a+)+$";
    assert_int_equal(sp_regex_compile(pat, strlen(pat), &re, &err), SP_OK);
    char text[4096];
    memset(text, 'a', sizeof text - 2);
    text[sizeof text - 2] = 'b';
    text[sizeof text - 1] = 0;
    clock_t c0 = clock();
    size_t ms, me;
    int r = sp_regex_find(re, text, strlen(text), 0, &ms, &me, &err);
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    assert_int_equal(r, -1);
    assert_int_equal(err.status, SP_ERR_LIMIT);
    assert_true(secs < 30.0);
    sp_regex_free(re);
}

/* A byte-level BPE tokenizer whose vocabulary is the 256 byte-level characters, no merges:
 * id b is byte b. */
static const char *byte_level_json(void)
{
    static char vocab[65536];
    extern const uint32_t sp_byte_level_char[256];
    size_t o = 0;
    o += (size_t)snprintf(vocab + o, sizeof vocab - o, "{\"model\":{\"type\":\"BPE\",\"merges\":[],\"vocab\":{");
    for (int b = 0; b < 256; b++)
        o += (size_t)snprintf(vocab + o, sizeof vocab - o, "%s\"\\u%04x\":%d", b ? "," : "",
                              sp_byte_level_char[b], b);
    snprintf(vocab + o, sizeof vocab - o,
             "}},\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false},"
             "\"decoder\":{\"type\":\"ByteLevel\"}}");
    return vocab;
}

/* A SentencePiece-style BPE with byte fallback and Llama's decoder chain: id b is the
 * byte token <0xBB>. */
static const char *byte_fallback_json(void)
{
    static char vocab[65536];
    size_t o = 0;
    o += (size_t)snprintf(vocab + o, sizeof vocab - o,
                          "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"merges\":[],\"vocab\":{");
    for (int b = 0; b < 256; b++)
        o += (size_t)snprintf(vocab + o, sizeof vocab - o, "%s\"<0x%02X>\":%d", b ? "," : "", b, b);
    snprintf(vocab + o, sizeof vocab - o,
             ",\"\\u2581\":256,\"a\":257}},\"decoder\":{\"type\":\"Sequence\",\"decoders\":["
             "{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
             "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
             "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}}");
    return vocab;
}

static void test_streaming_detokenizer(void **state)
{
    (void)state;
    sp_tokenizer *t;
    sp_error err = {0};
    /* "é😀": every byte is its own token, so characters arrive split across tokens and
     * must be held back until complete */
    const char *text = "h\xc3\xa9llo \xf0\x9f\x98\x80!";
    int32_t *ids;
    size_t n;
    if (open_text(byte_level_json(), &t, &err) != SP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(sp_tokenizer_encode(t, text, strlen(text), false, &ids, &n, &err), SP_OK);
    assert_int_equal(n, strlen(text));
    sp_detokenizer *d;
    assert_int_equal(sp_detokenizer_new(t, false, &d, &err), SP_OK);
    char out[256] = "";
    size_t ol = 0;
    for (size_t i = 0; i < n; i++) {
        const char *piece;
        size_t pl;
        assert_int_equal(sp_detokenizer_push(d, ids[i], &piece, &pl, &err), SP_OK);
        assert_true(sp_utf8_valid(piece, pl, NULL));
        memcpy(out + ol, piece, pl);
        ol += pl;
        /* after the first byte of é (id 0xc3) nothing new may appear */
        if (i == 1)
            assert_int_equal(pl, 0);
    }
    const char *rest;
    size_t rl;
    assert_int_equal(sp_detokenizer_flush(d, &rest, &rl, &err), SP_OK);
    assert_int_equal(rl, 0);
    out[ol] = 0;
    assert_string_equal(out, text);
    sp_detokenizer_free(d);
    /* a dangling partial character is flushed lossily at the end */
    assert_int_equal(sp_detokenizer_new(t, false, &d, &err), SP_OK);
    const char *piece;
    size_t pl;
    assert_int_equal(sp_detokenizer_push(d, ids[0], &piece, &pl, &err), SP_OK);
    assert_int_equal(sp_detokenizer_push(d, 0xf0, &piece, &pl, &err), SP_OK);
    assert_int_equal(pl, 0);
    assert_int_equal(sp_detokenizer_flush(d, &rest, &rl, &err), SP_OK);
    assert_string_equal(rest, "\xef\xbf\xbd");
    sp_detokenizer_free(d);
    free(ids);
    sp_tokenizer_close(t);
}

/* Streams ids through a detokenizer, checking after every push that its window (the ids
 * a push decodes again) stays within a constant, and returns everything it emitted
 * (malloc'd, NUL-terminated). A window that grows with the input made decoding quadratic. */
static char *stream_bounded(sp_tokenizer *t, const int32_t *ids, size_t n, size_t *out_len)
{
    sp_error err = {0};
    sp_detokenizer *d;
    assert_int_equal(sp_detokenizer_new(t, false, &d, &err), SP_OK);
    size_t cap = 4 * n + 16, ol = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    for (size_t i = 0; i <= n; i++) {
        const char *piece;
        size_t pl;
        if (i < n)
            assert_int_equal(sp_detokenizer_push(d, ids[i], &piece, &pl, &err), SP_OK);
        else
            assert_int_equal(sp_detokenizer_flush(d, &piece, &pl, &err), SP_OK);
        assert_true(sp_detokenizer_window(d) <= 32);
        assert_true(sp_utf8_valid(piece, pl, NULL));
        assert_true(ol + pl < cap);
        memcpy(out + ol, piece, pl);
        ol += pl;
    }
    out[ol] = '\0';
    *out_len = ol;
    sp_detokenizer_free(d);
    return out;
}

static bool all_replacement(const char *s, size_t len, size_t count)
{
    if (len != 3 * count)
        return false;
    for (size_t i = 0; i < count; i++)
        if (memcmp(s + 3 * i, "\xef\xbf\xbd", 3) != 0)
            return false;
    return true;
}

/* Bytes that never form a character. The detokenizer waited for them to complete while
 * re-decoding a window that grew with every id (3,500 ids took 12 s under ASan): now at
 * most a few ids wait, then they come out as a full decode renders them, U+FFFD. */
static void test_detokenizer_window_bounded(void **state)
{
    (void)state;
    enum { N = 20000 };
    int32_t *ids = malloc(N * sizeof *ids);
    assert_non_null(ids);
    sp_tokenizer *t;
    sp_error err = {0};
    size_t ol;
    /* byte-level: id b is byte b; 0xff is never valid UTF-8, 0xf0 always waits for more */
    if (open_text(byte_level_json(), &t, &err) != SP_OK)
        fail_msg("%s", err.msg);
    for (int32_t lead = 0xf0; lead <= 0xff; lead += 0x0f) {
        for (size_t i = 0; i < N; i++)
            ids[i] = lead;
        char *out = stream_bounded(t, ids, N, &ol);
        char *full;
        size_t fl;
        assert_int_equal(sp_tokenizer_decode(t, ids, N, false, &full, &fl, &err), SP_OK);
        assert_true(all_replacement(full, fl, N));
        assert_int_equal(ol, fl);
        assert_memory_equal(out, full, fl);
        free(full);
        free(out);
    }
    /* random bytes: whatever they decode to, the window stays bounded */
    uint32_t x = 12345;
    for (size_t i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        ids[i] = (int32_t)((x >> 16) & 0xff);
    }
    free(stream_bounded(t, ids, N, &ol));
    sp_tokenizer_close(t);
    /* byte fallback: "é" as two byte tokens, then invalid bytes. A full decode turns the
     * whole byte run into U+FFFD (so the later bytes rewrite the "é" already emitted);
     * text once emitted stays, and the rest comes out as U+FFFD, byte by byte. */
    if (open_text(byte_fallback_json(), &t, &err) != SP_OK)
        fail_msg("%s", err.msg);
    ids[0] = 0xc3;
    ids[1] = 0xa9;
    for (size_t i = 2; i < N; i++)
        ids[i] = 0xff;
    char *out = stream_bounded(t, ids, N, &ol);
    assert_true(ol >= 2 && memcmp(out, "\xc3\xa9", 2) == 0);
    assert_true(all_replacement(out + 2, ol - 2, N - 2));
    free(out);
    sp_tokenizer_close(t);
    free(ids);
}

/* WordPiece's cleanup is a chain of str::replace calls: each one pass that does not rescan
 * its own output. A rescan from the start after every hit was quadratic in a token's
 * length and also rewrote "x  '  y" (whose " ' " becomes "'" between two spaces) twice. */
static void test_wordpiece_cleanup_single_pass(void **state)
{
    (void)state;
    enum { N = 200000 };
    size_t cap = 2 * N + 256;
    char *json = malloc(cap);
    assert_non_null(json);
    size_t o = (size_t)snprintf(json, cap, "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\","
                                "\"vocab\":{\"[UNK]\":0,\"x  '  y\":1,\"");
    for (size_t i = 0; i < N / 2; i++)
        o += (size_t)snprintf(json + o, cap - o, " .");
    snprintf(json + o, cap - o, "\":2}},\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\","
             "\"cleanup\":true}}");
    sp_tokenizer *t;
    sp_error err = {0};
    if (sp_tokenizer_from_text(json, strlen(json), NULL, 0, &t, &err) != SP_OK)
        fail_msg("%s", err.msg);
    free(json);
    int32_t ids[] = {1, 2};
    char *text;
    size_t len;
    assert_int_equal(sp_tokenizer_decode(t, ids, 1, false, &text, &len, &err), SP_OK);
    assert_string_equal(text, "x ' y");
    free(text);
    /* token 2 gets a space before it: "  . . ." (N/2 " ." pairs) becomes " " + "." * N/2 */
    assert_int_equal(sp_tokenizer_decode(t, ids, 2, false, &text, &len, &err), SP_OK);
    assert_int_equal(len, 6 + N / 2);
    assert_memory_equal(text, "x ' y ", 6);
    for (size_t i = 6; i < len; i++)
        assert_int_equal(text[i], '.');
    free(text);
    sp_tokenizer_close(t);
}

/* Replaces `field`'s value (the JSON text from `old`) in the tiny tokenizer. */
static const char *with_component(const char *old, const char *repl)
{
    static char buf[70000];
    const char *base = tiny_json(NULL, NULL, NULL);
    const char *at = strstr(base, old);
    assert_non_null(at);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - base), base, repl, at + strlen(old));
    return buf;
}

/* A component that fails half-built inside a Sequence leaked (an invalid Split regex);
 * ASan's leak check in the sanitizer run is the assertion here. */
static void test_error_paths_free(void **state)
{
    (void)state;
    const char *pre = "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";
    const char *bad_split = "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\"}";
    char repl[1024];
    snprintf(repl, sizeof repl, "\"pre_tokenizer\":%s", bad_split);
    expect_load_error(with_component(pre, repl), SP_ERR_FORMAT, "missing closing parenthesis");
    snprintf(repl, sizeof repl, "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":"
             "[{\"type\":\"Digits\"},%s]}", bad_split);
    expect_load_error(with_component(pre, repl), SP_ERR_FORMAT, "missing closing parenthesis");
    snprintf(repl, sizeof repl, "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":"
             "[{\"type\":\"Sequence\",\"pretokenizers\":[%s]}]}", bad_split);
    expect_load_error(with_component(pre, repl), SP_ERR_FORMAT, "missing closing parenthesis");
    expect_load_error(with_component("\"normalizer\":null", "\"normalizer\":{\"type\":\"Sequence\","
                      "\"normalizers\":[{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"[\"},\"content\":\"x\"}]}"),
                      SP_ERR_FORMAT, "regex");
    expect_load_error(with_component("\"decoder\":{\"type\":\"ByteLevel\"}", "\"decoder\":{\"type\":"
                      "\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"(\"},\"content\":\"\"}]}"),
                      SP_ERR_UNSUPPORTED, "Replace");
    expect_load_error(with_component("\"post_processor\":null", "\"post_processor\":{\"type\":\"Sequence\","
                      "\"processors\":[{\"type\":\"TemplateProcessing\",\"single\":7}]}"), SP_ERR_FORMAT, "");
}

/* An empty vocabulary loads (tokenizers accepts it) and encodes to nothing without
 * passing NULL to memcpy (UBSan flagged the BPE cache). */
static void test_empty_vocabulary(void **state)
{
    (void)state;
    const char *json = "{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},"
                       "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false}}";
    sp_tokenizer *t;
    sp_error err = {0};
    if (sp_tokenizer_from_text(json, strlen(json), NULL, 0, &t, &err) != SP_OK)
        fail_msg("%s", err.msg);
    int32_t *ids;
    size_t n;
    assert_int_equal(sp_tokenizer_encode(t, "hi there", 8, true, &ids, &n, &err), SP_OK);
    assert_int_equal(n, 0);
    free(ids);
    char *text;
    size_t len;
    assert_int_equal(sp_tokenizer_decode(t, NULL, 0, false, &text, &len, &err), SP_OK);
    assert_int_equal(len, 0);
    free(text);
    sp_tokenizer_close(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_tokenizer_works),
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_hostile_regex_is_bounded),
        cmocka_unit_test(test_streaming_detokenizer),
        cmocka_unit_test(test_detokenizer_window_bounded),
        cmocka_unit_test(test_wordpiece_cleanup_single_pass),
        cmocka_unit_test(test_error_paths_free),
        cmocka_unit_test(test_empty_vocabulary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
