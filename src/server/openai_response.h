/* openai_response.h: OpenAI response objects: errors, usage, log-probabilities, chat and
 * completion objects and their streamed chunks (server-sent events). cJSON trees built
 * from plain inputs; the caller prints and frees them. */
#ifndef SP_SERVER_OPENAI_RESPONSE_H
#define SP_SERVER_OPENAI_RESPONSE_H

#include "chat_output.h"
#include "scheduler.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>

/* {"error": {"message", "type", "param", "code"}} for an HTTP status. */
cJSON *sp_oai_error(int status, const char *message, const char *param);
cJSON *sp_oai_usage(int64_t n_prompt, int64_t n_completion);

/* Token strings for log-probabilities: the decoded text of one id. */
typedef struct sp_oai_tokens {
    sp_tokenizer *tok;
    pthread_mutex_t *mu;
} sp_oai_tokens;

/* chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]} */
cJSON *sp_oai_chat_logprobs(const sp_oai_tokens *t, const sp_seq_token *toks, size_t n);
/* completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; offsets start
 * at text_offset0 */
cJSON *sp_oai_completion_logprobs(const sp_oai_tokens *t, const sp_seq_token *toks, size_t n,
                                  size_t text_offset0);

/* The message or delta of a chat choice from parsed output (content, reasoning_content,
 * tool_calls with ids "call_<id>_<index>"). call_index0: index of the first call. */
cJSON *sp_oai_chat_message(const sp_chat_delta *d, bool with_role, bool is_delta,
                           const char *id, size_t call_index0);

/* Streamed chunk skeleton: {"id", "object", "created", "model", "choices": [choice]} (choice
 * may be NULL: an empty choices list). */
cJSON *sp_oai_chunk(const char *object, const char *id, int64_t created, const char *model,
                    cJSON *choice);

#endif
