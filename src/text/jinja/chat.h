/* chat.h: apply_chat_template as transformers does it.
 *
 * A chat template set comes from a model directory (chat_template.jinja, else
 * tokenizer_config.json's chat_template: a string, or a list of named templates), a
 * tokenizer_config.json file, or a .jinja file. Rendering passes the special tokens of
 * tokenizer_config.json (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
 * mask_token and named extra_special_tokens), tools=None, documents=None and
 * add_generation_prompt=False, then the context's own keys on top. With named templates,
 * "tool_use" is chosen when the context has tools, else "default". */
#ifndef SP_TEXT_CHAT_H
#define SP_TEXT_CHAT_H

#include "text/jinja/jinja.h"

/* sp_chat_open, sp_chat_close, sp_chat_set_plain and sp_chat_render are declared in
 * specula.h. */

/* A chat template set from memory: the text of a tokenizer_config.json (or NULL) and a
 * template (or NULL) that, like chat_template.jinja, replaces the config's default. */
sp_status sp_chat_from_text(const char *template_text, const char *config_json, size_t config_len,
                            sp_chat **out, sp_error *err);


#endif
