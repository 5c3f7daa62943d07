/* test_server_output.c: the server's reasoning / tool-call splitter (src/server/
 * chat_output.c) on text rendered by the real shared chat templates: the assistant turn
 * a model would generate is the full render minus the generation-prompt render. Each case
 * is parsed at once and fed byte by byte (streaming): both must give the same reasoning,
 * answer and tool calls. Also the request parser on good and bad bodies. */
#include "test_util.h"

#include "chat_output.h"
#include "openai_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *render(const char *tmpl, const char *ctx)
{
    char path[1024];
    snprintf(path, sizeof path, "%s", fixture_path(tmpl));
    sp_chat *chat;
    sp_error err = {0};
    assert_int_equal(sp_chat_open(path, &chat, &err), SP_OK);
    sp_render_options opt = {.now = "2025-07-10T12:00:00"};
    char *out;
    size_t len;
    sp_status st = sp_chat_render(chat, ctx, strlen(ctx), &opt, &out, &len, &err);
    if (st != SP_OK)
        fail_msg("%s: %s", tmpl, err.msg);
    sp_chat_close(chat);
    return out;
}

/* The generated part: full minus the generation prompt, minus the end-of-turn token the
 * model stops at (not part of the text it returns). */
static char *generated(const char *tmpl, const char *with_gen_prompt, const char *full_ctx,
                       const char *eos)
{
    char *prefix = render(tmpl, with_gen_prompt);
    char *full = render(tmpl, full_ctx);
    size_t pl = strlen(prefix);
    if (strncmp(full, prefix, pl) != 0)
        fail_msg("%s: the full render does not extend the generation prompt", tmpl);
    char *out = strdup(full + pl);
    size_t ol = strlen(out), el = eos ? strlen(eos) : 0;
    while (ol > 0 && out[ol - 1] == '\n')
        out[--ol] = 0;
    if (eos && ol >= el && strcmp(out + ol - el, eos) == 0)
        out[ol - el] = 0;
    free(prefix);
    free(full);
    return out;
}

typedef struct parsed {
    sp_strbuf content, reasoning;
    char names[4][64];
    char args[4][256];
    size_t n_calls;
} parsed;

static void collect(parsed *p, const sp_chat_delta *d)
{
    sp_strbuf_add(&p->content, d->content.p ? d->content.p : "", d->content.len);
    sp_strbuf_add(&p->reasoning, d->reasoning.p ? d->reasoning.p : "", d->reasoning.len);
    for (size_t i = 0; i < d->n_calls && p->n_calls < 4; i++, p->n_calls++) {
        snprintf(p->names[p->n_calls], 64, "%s", d->calls[i].name);
        snprintf(p->args[p->n_calls], 256, "%s", d->calls[i].arguments);
    }
}

static void parse(const sp_chat_format *f, const char *text, bool bytewise, parsed *p)
{
    memset(p, 0, sizeof *p);
    sp_strbuf_add(&p->content, "", 0);
    sp_strbuf_add(&p->reasoning, "", 0);
    sp_chat_parser *ps = sp_chat_parser_new(f);
    sp_chat_delta d = {0};
    size_t n = strlen(text);
    if (!bytewise) {
        assert_true(sp_chat_parser_feed(ps, text, n, true, &d));
        collect(p, &d);
    } else {
        for (size_t i = 0; i <= n; i++) {
            sp_chat_delta_clear(&d);
            assert_true(sp_chat_parser_feed(ps, text + i, i < n ? 1 : 0, i == n, &d));
            collect(p, &d);
        }
    }
    sp_chat_delta_free(&d);
    sp_chat_parser_free(ps);
}

static char *trimmed(const sp_strbuf *b)
{
    const char *s = b->p ? b->p : "";
    size_t n = b->len;
    while (n && strchr(" \n", *s))
        s++, n--;
    while (n && strchr(" \n", s[n - 1]))
        n--;
    char *o = malloc(n + 1);
    memcpy(o, s, n);
    o[n] = 0;
    return o;
}

static void json_equal(const char *a, const char *b)
{
    cJSON *ja = cJSON_Parse(a), *jb = cJSON_Parse(b);
    if (!ja || !jb || !cJSON_Compare(ja, jb, 1))
        fail_msg("JSON differs: %s vs %s", a, b);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
}

/* Parses text both ways and checks the expected split. */
static void expect(const sp_chat_format *f, const char *text, const char *reasoning,
                   const char *content, const char *call_name, const char *call_args)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        parsed p;
        parse(f, text, bytewise, &p);
        char *r = trimmed(&p.reasoning), *c = trimmed(&p.content);
        if (strcmp(r, reasoning) != 0 || strcmp(c, content) != 0)
            fail_msg("%s: reasoning '%s' content '%s' from:\n%s", bytewise ? "streamed" : "whole",
                     r, c, text);
        if (call_name) {
            if (p.n_calls != 1)
                fail_msg("%s: %zu calls from:\n%s", bytewise ? "streamed" : "whole", p.n_calls, text);
            assert_string_equal(p.names[0], call_name);
            json_equal(p.args[0], call_args);
        } else {
            assert_int_equal(p.n_calls, 0);
        }
        free(r);
        free(c);
        sp_strbuf_free(&p.content);
        sp_strbuf_free(&p.reasoning);
    }
}

#define USER "{\"role\":\"user\",\"content\":\"Weather in Paris?\"}"
#define TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"w\"," \
              "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]"
#define CALL "\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"," \
             "\"arguments\":{\"city\":\"Paris\"}}}]"
#define GEN(extra) "{\"messages\":[" USER "]," extra "\"add_generation_prompt\":true}"
#define FULL(assistant, extra) "{\"messages\":[" USER "," assistant "]," extra "\"add_generation_prompt\":false}"

static void test_qwen3_think_and_tool_call(void **state)
{
    (void)state;
    const char *t = "shared/templates/Qwen-Qwen3-0.6B.jinja";
    char *g = generated(t, GEN(TOOLS ","),
                        FULL("{\"role\":\"assistant\",\"reasoning_content\":\"The user wants weather.\","
                             "\"content\":\"Let me check.\"," CALL "}", TOOLS ","),
                        "<|im_end|>");
    sp_chat_format f = {.think = true, .tools = SP_TOOLS_HERMES};
    expect(&f, g, "The user wants weather.", "Let me check.", "get_weather", "{\"city\":\"Paris\"}");
    free(g);
    /* plain answer after reasoning, no tools */
    g = generated(t, GEN(""), FULL("{\"role\":\"assistant\",\"reasoning_content\":\"Think.\","
                                   "\"content\":\"Sunny.\"}", ""), "<|im_end|>");
    expect(&f, g, "Think.", "Sunny.", NULL, NULL);
    free(g);
    /* enable_thinking=false: the prompt closes the think block itself */
    char *prompt = render(t, GEN("\"enable_thinking\":false,"));
    assert_false(sp_chat_prompt_opens_think(prompt, strlen(prompt)));
    free(prompt);
}

static void test_hermes_tool_call(void **state)
{
    (void)state;
    const char *t = "shared/templates/NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja";
    char *g = generated(t, GEN(TOOLS ","), FULL("{\"role\":\"assistant\"," CALL "}", TOOLS ","),
                        "<|im_end|>");
    sp_chat_format f = {.tools = SP_TOOLS_HERMES};
    expect(&f, g, "", "", "get_weather", "{\"city\":\"Paris\"}");
    free(g);
    /* text that is not a call stays text */
    expect(&f, "I use <tool_call>not json</tool_call> sometimes", "",
           "I use <tool_call>not json</tool_call> sometimes", NULL, NULL);
}

static void test_deepseek_r1_opens_think(void **state)
{
    (void)state;
    const char *t = "shared/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja";
    char *prompt = render(t, GEN(""));
    assert_true(sp_chat_prompt_opens_think(prompt, strlen(prompt)));
    free(prompt);
    sp_chat_format f = {.think = true, .start_in_think = true};
    expect(&f, "The user greets.\n</think>\n\nHello! How can I help?", "The user greets.",
           "Hello! How can I help?", NULL, NULL);
}

static void test_llama31_json_tool_call(void **state)
{
    (void)state;
    const char *t = "shared/templates/meta-llama-Llama-3.1-8B-Instruct.jinja";
    char *g = generated(t, GEN(TOOLS ","), FULL("{\"role\":\"assistant\"," CALL "}", TOOLS ","),
                        "<|eot_id|>");
    sp_chat_format f = {.tools = SP_TOOLS_LLAMA3};
    expect(&f, g, "", "", "get_weather", "{\"city\":\"Paris\"}");
    free(g);
    g = generated(t, GEN(TOOLS ","),
                  FULL("{\"role\":\"assistant\",\"content\":\"It is sunny {as always}.\"}", TOOLS ","),
                  "<|eot_id|>");
    expect(&f, g, "", "It is sunny {as always}.", NULL, NULL);
    free(g);
    expect(&f, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
           "", "get_weather", "{\"city\":\"Paris\"}");
}

static void test_gpt_oss_harmony(void **state)
{
    (void)state;
    const char *t = "shared/templates/openai-gpt-oss-120b.jinja";
    char *g = generated(t, GEN(TOOLS ","),
                        FULL("{\"role\":\"assistant\",\"thinking\":\"The user wants weather.\"," CALL "}",
                             TOOLS ","),
                        "<|call|>");
    sp_chat_format f = {.harmony = true};
    expect(&f, g, "The user wants weather.", "", "get_weather", "{\"city\":\"Paris\"}");
    free(g);
    g = generated(t, GEN(""), FULL("{\"role\":\"assistant\",\"thinking\":\"Easy.\",\"content\":\"Sunny.\"}", ""),
                  "<|return|>");
    expect(&f, g, "Easy.", "Sunny.", NULL, NULL);
    free(g);
}

static void test_plain_text_untouched(void **state)
{
    (void)state;
    sp_chat_format f = {0};
    expect(&f, "def f():\n    return '<think>'", "", "def f():\n    return '<think>'", NULL, NULL);
}

static sp_status parse_req(sp_oai_kind k, const char *body, sp_oai_request *r, const char **param)
{
    sp_error err = {0};
    return sp_oai_request_parse(k, body, strlen(body), r, param, &err);
}

static void test_request_parser(void **state)
{
    (void)state;
    sp_oai_request r;
    const char *param;
    assert_int_equal(parse_req(SP_OAI_CHAT,
                               "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                               "{\"type\":\"text\",\"text\":\"b\"}]}],\"max_completion_tokens\":7,\"max_tokens\":3,"
                               "\"stop\":\"x\",\"top_k\":-1,\"seed\":-3,\"logprobs\":true,\"top_logprobs\":2,"
                               "\"chat_template_kwargs\":{\"enable_thinking\":false},\"whatever\":[1]}",
                               &r, &param),
                     SP_OK);
    assert_int_equal(r.max_tokens, 7);
    assert_int_equal(r.n_stop, 1);
    assert_int_equal(r.sampling.top_k, 0);
    assert_int_equal(r.top_logprobs, 2);
    assert_non_null(strstr(r.chat_context, "\"content\":\"ab\""));
    assert_non_null(strstr(r.chat_context, "\"enable_thinking\":false"));
    assert_non_null(strstr(r.chat_context, "\"add_generation_prompt\":true"));
    sp_oai_request_fini(&r);
    assert_int_equal(parse_req(SP_OAI_COMPLETION, "{\"prompt\":[[5,6,7]]}", &r, &param), SP_OK);
    assert_int_equal(r.n_prompt_ids, 3);
    sp_oai_request_fini(&r);
    static const struct { sp_oai_kind k; const char *body, *param; } bad[] = {
        {SP_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "top_logprobs"},
        {SP_OAI_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages"},
        {SP_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", "max_tokens"},
        {SP_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream_options\":1}", "stream_options"},
        {SP_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", "tools"},
        {SP_OAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs"},
        {SP_OAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs"},
        {SP_OAI_COMPLETION, "{\"prompt\":\"x\",\"seed\":1.5}", "seed"},
        {SP_OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt"},
        {SP_OAI_COMPLETION, "{\"prompt\":[1,-1]}", "prompt"},
        {SP_OAI_COMPLETION, "{\"prompt\":\"x\",\"temperature\":-1}", "temperature"},
        {SP_OAI_COMPLETION, "{\"prompt\":\"x\",\"stop\":[\"a\",3]}", "stop"},
        {SP_OAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":1e300}", "max_tokens"},
        {SP_OAI_COMPLETION, "{\"prompt\":\"x\"", NULL},
        {SP_OAI_COMPLETION, "", NULL},
        {SP_OAI_COMPLETION, "null", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (parse_req(bad[i].k, bad[i].body, &r, &param) != SP_ERR_INVALID_ARG)
            fail_msg("accepted: %s", bad[i].body);
        if (bad[i].param && (!param || strcmp(param, bad[i].param) != 0))
            fail_msg("%s: param %s, wanted %s", bad[i].body, param ? param : "null", bad[i].param);
        sp_oai_request_fini(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_think_and_tool_call),
        cmocka_unit_test(test_hermes_tool_call),
        cmocka_unit_test(test_deepseek_r1_opens_think),
        cmocka_unit_test(test_llama31_json_tool_call),
        cmocka_unit_test(test_gpt_oss_harmony),
        cmocka_unit_test(test_plain_text_untouched),
        cmocka_unit_test(test_request_parser),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
