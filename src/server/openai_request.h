/* openai_request.h: parsing and validation of OpenAI request bodies
 * (/v1/chat/completions, /v1/completions) into a plain struct.
 *
 * Field semantics as OpenAI defines them; unknown fields are ignored, a known field of
 * the wrong type or out of range is an error naming the field (HTTP 400). Nothing here
 * touches the model: the chat context is produced as JSON text for the chat template,
 * tokenization and context checks happen later. Pure functions, thread-safe. */
#ifndef SP_SERVER_OPENAI_REQUEST_H
#define SP_SERVER_OPENAI_REQUEST_H

#include "specula.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SP_OAI_MAX_TOP_LOGPROBS 20
#define SP_OAI_MAX_STOP 16
#define SP_OAI_MAX_TOKENS_LIMIT 1000000 /* beyond this max_tokens is absurd: 400 */

typedef enum sp_oai_kind { SP_OAI_CHAT = 1, SP_OAI_COMPLETION } sp_oai_kind;

typedef struct sp_oai_request {
    sp_oai_kind kind;
    char *model; /* NULL when absent */
    /* chat: the template context as JSON text: messages (content parts joined, tool-call
     * arguments given as JSON strings parsed to objects), tools, add_generation_prompt
     * true, and chat_template_kwargs' keys on top */
    char *chat_context;
    bool has_tools;
    /* completion: the prompt as text, or as token ids */
    char *prompt;
    size_t prompt_len;
    int32_t *prompt_ids;
    size_t n_prompt_ids;
    bool echo;

    int64_t max_tokens; /* -1: not given (until the context is full) */
    bool set_temperature, set_top_p, set_top_k, set_min_p, set_seed;
    sp_sampling_params sampling; /* only the fields flagged set_* are meaningful */
    char *stop[SP_OAI_MAX_STOP];
    size_t n_stop;
    bool stream, include_usage;
    bool logprobs;         /* report log-probabilities of the chosen tokens */
    int32_t top_logprobs;  /* and of this many alternatives (0..20) */
    bool ignore_eos;       /* extension (vLLM's) */
} sp_oai_request;

/* Parses body (not necessarily NUL-terminated). On failure returns SP_ERR_INVALID_ARG with
 * the message in err and the offending field in *param (a static string, or NULL). The
 * request is always safe to pass to sp_oai_request_fini. */
sp_status sp_oai_request_parse(sp_oai_kind kind, const char *body, size_t len,
                               sp_oai_request *req, const char **param, sp_error *err);
void sp_oai_request_fini(sp_oai_request *req);

#endif
