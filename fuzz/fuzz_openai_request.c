/* fuzz_openai_request.c: the OpenAI request parser (chat and completions) and the chat
 * output splitter on arbitrary bytes. The first byte picks the endpoint and the output
 * format; the rest is the body (or the generated text). */
#include "chat_output.h"
#include "openai_request.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t sel = data[0];
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    sp_oai_request req;
    const char *param;
    sp_error err;
    sp_oai_request_parse(sel & 1 ? SP_OAI_CHAT : SP_OAI_COMPLETION, body, n, &req, &param, &err);
    sp_oai_request_fini(&req);

    /* the splitter, fed in two pieces at a point chosen by the selector */
    sp_chat_format f = {.think = sel & 2, .start_in_think = sel & 4, .harmony = sel & 8,
                        .tools = (sp_tool_format)((sel >> 4) % 3)};
    sp_chat_parser *p = sp_chat_parser_new(&f);
    sp_chat_delta d = {0};
    size_t cut = n ? (size_t)(sel * 7) % n : 0;
    if (p) {
        sp_chat_parser_feed(p, body, cut, false, &d);
        sp_chat_parser_feed(p, body + cut, n - cut, true, &d);
    }
    sp_chat_parser_free(p);
    sp_chat_delta_free(&d);
    return 0;
}
