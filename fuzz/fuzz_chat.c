/* fuzz_chat.c: chat template rendering as apply_chat_template does it, with hostile
 * templates. Input: a template, optionally a NUL and a tokenizer_config.json; rendered
 * over a fixed conversation with a system prompt, tool calls and tools, once with and
 * once without tools (the named-template choice), with transformers' defaults. */
#include "fuzz.h"
#include "specula.h"
#include "text/jinja/chat.h"

#include <stdlib.h>
#include <string.h>

static const char CONFIG[] =
    "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"}, \"eos_token\": \"</s>\","
    " \"pad_token\": null, \"extra_special_tokens\": {\"image_token\": \"<img>\"}}";

static const char *const CONTEXTS[] = {
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"22C\"},"
    " {\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": \"It is 22C.\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false}",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi \\u00e9\\u0000\"}]}",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *tpl, *cfg;
    size_t nt, nc;
    if (fuzz_split(data, size, &tpl, &nt, &cfg, &nc))
        return 0;
    sp_chat *c;
    sp_error err = {0};
    if (sp_chat_from_text(tpl, nc ? cfg : CONFIG, nc ? nc : strlen(CONFIG), &c, &err) == SP_OK) {
        sp_render_options opt = {.time_limit_ms = 1000, .now = "2025-01-01T00:00:00"};
        for (size_t i = 0; i < sizeof CONTEXTS / sizeof *CONTEXTS; i++) {
            char *out = NULL;
            size_t n;
            if (sp_chat_render(c, CONTEXTS[i], strlen(CONTEXTS[i]), &opt, &out, &n, &err) == SP_OK)
                free(out);
        }
        sp_chat_close(c);
    }
    free(tpl);
    free(cfg);
    return 0;
}
