/* chat_output.h: splits generated chat text into reasoning, answer and tool calls, as the
 * model's chat format writes them, incrementally (streaming) or all at once.
 *
 * Formats (chosen from the tokenizer's vocabulary and the rendered prompt):
 *   - <think>...</think> (Qwen3, QwQ, DeepSeek-R1): reasoning_content; a prompt that ends
 *     inside <think> (R1's generation prompt) starts in reasoning;
 *   - Hermes / Qwen <tool_call>{"name": ..., "arguments": {...}}</tool_call>;
 *   - Llama 3.1 JSON tool calls: the whole answer is {"name": ..., "parameters": {...}}
 *     (optionally after <|python_tag|>), only when the request has tools;
 *   - gpt-oss harmony: <|channel|>analysis<|message|>... is reasoning, final is the answer,
 *     commentary to=functions.NAME ... <|message|>{args} is a tool call.
 * Text that could be the start of a marker is held back until it is decided. Not
 * thread-safe; one parser per response. */
#ifndef SP_SERVER_CHAT_OUTPUT_H
#define SP_SERVER_CHAT_OUTPUT_H

#include "specula.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum sp_tool_format { SP_TOOLS_NONE = 0, SP_TOOLS_HERMES, SP_TOOLS_LLAMA3 } sp_tool_format;

typedef struct sp_chat_format {
    bool think;          /* <think> ... </think> */
    bool start_in_think; /* the prompt left a <think> open */
    bool harmony;        /* gpt-oss channels */
    sp_tool_format tools;
} sp_chat_format;

/* The format for a response: from the vocabulary (which markers exist) and the rendered
 * prompt (an open <think> at its end); tool formats only when the request has tools. */
sp_chat_format sp_chat_format_detect(const sp_tokenizer *tok, const char *prompt, size_t prompt_len,
                                     bool has_tools);
/* Whether a rendered prompt ends inside an open <think> (DeepSeek-R1's generation prompt):
 * the generated text then starts with reasoning. */
bool sp_chat_prompt_opens_think(const char *prompt, size_t prompt_len);
/* Whether the format needs special tokens kept in the generated text. */
bool sp_chat_format_keeps_special(const sp_chat_format *f);

typedef struct sp_strbuf {
    char *p;
    size_t len, cap;
} sp_strbuf;
bool sp_strbuf_add(sp_strbuf *b, const char *s, size_t n);
void sp_strbuf_free(sp_strbuf *b);

typedef struct sp_tool_call {
    char *name;
    char *arguments; /* JSON text */
} sp_tool_call;

/* What one feed produced. Reset by the caller (sp_chat_delta_clear) between feeds. */
typedef struct sp_chat_delta {
    sp_strbuf content, reasoning;
    sp_tool_call *calls;
    size_t n_calls, calls_cap;
} sp_chat_delta;
void sp_chat_delta_clear(sp_chat_delta *d);
void sp_chat_delta_free(sp_chat_delta *d);

typedef struct sp_chat_parser sp_chat_parser;
sp_chat_parser *sp_chat_parser_new(const sp_chat_format *f);
void sp_chat_parser_free(sp_chat_parser *p);
/* Feeds generated text; `final` flushes everything held back. Appends to *d. Returns false
 * when out of memory. */
bool sp_chat_parser_feed(sp_chat_parser *p, const char *text, size_t n, bool final,
                         sp_chat_delta *d);

#endif
