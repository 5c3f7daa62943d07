/* tokenizer.h: Hugging Face tokenizer.json, exactly like the `tokenizers` library.
 *
 * sp_tokenizer_open loads tokenizer.json (and tokenizer_config.json beside it: special
 * tokens, BOS/EOS behaviour, chat templates). Encoding and decoding follow tokenizers'
 * pipeline step for step (see tok_internal.h). A tokenizer caches BPE results and holds
 * regex match state: use it from one thread at a time.
 *
 * Public entry points are declared in specula.h; this header adds what other modules of
 * the library use (the chat-template module reads special tokens and templates). */
#ifndef SP_TEXT_TOKENIZER_H
#define SP_TEXT_TOKENIZER_H

#include "specula.h"

/* A tokenizer from memory: the text of tokenizer.json and of tokenizer_config.json (or
 * NULL). For tests and fuzzing; sp_tokenizer_open reads files. */
sp_status sp_tokenizer_from_text(const char *json, size_t n, const char *config_json,
                                 size_t config_len, sp_tokenizer **out, sp_error *err);

/* A growable id list. */
typedef struct sp_tok_ids {
    int32_t *v;
    size_t n, cap;
} sp_tok_ids;

bool sp_tok_ids_push(sp_tok_ids *ids, int32_t id);

/* Encodes into an existing list (appending). */
sp_status sp_tokenizer_encode_into(sp_tokenizer *t, const char *text, size_t len,
                                   bool add_special, sp_tok_ids *out, sp_error *err);

/* Special token strings from tokenizer_config.json (NULL when absent). */
const char *sp_tokenizer_special(const sp_tokenizer *t, const char *name);
/* The tokenizer_config.json object (cJSON *), or NULL. */
const void *sp_tokenizer_config_json(const sp_tokenizer *t);
/* The chat template: the named one when name is not NULL and exists, else the default.
 * NULL when the tokenizer has none. */
const char *sp_tokenizer_chat_template(const sp_tokenizer *t, const char *name);
/* Directory the tokenizer was loaded from. */
const char *sp_tokenizer_dir(const sp_tokenizer *t);

/* How many ids the streaming detokenizer's next push decodes again (its window; at most
 * a small constant, whatever the ids: tests check this bound). */
size_t sp_detokenizer_window(const sp_detokenizer *d);

#endif
