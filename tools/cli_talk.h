/* cli_talk.h: what `run`, `chat` and `bench` share to talk to a model the way its users do.
 *
 *   - where the bundled default pair lives (cli_default_pair);
 *   - opening a model with its tokenizer, chat template, session and draft (cli_talk);
 *   - rendering a conversation through the model's chat template (add_generation_prompt
 *     true, as `specula template` renders it) and encoding it as apply_chat_template does;
 *   - showing a reply as it streams (cli_reply): control tokens hidden, thinking
 *     (<think>...</think>, the gpt-oss analysis channel) dimmed on a terminal or prefixed
 *     with "thinking: " elsewhere, and the final text kept apart for the history, since
 *     chat templates leave earlier turns' thinking out.
 *
 * Only the public API (specula.h) is used here. */
#ifndef SP_TOOLS_CLI_TALK_H
#define SP_TOOLS_CLI_TALK_H

#include "cli.h"
#include "cli_spec.h"

#include <signal.h>
#include <stdio.h>

/* The bundled pair: the first of $SPECULA_MODELS, ./models (the working directory) and the
 * source tree this binary was built from (SPECULA_SOURCE_DIR/models) that holds
 * default/config.json. Writes DIR/default and DIR/default-draft; false when none has it. */
bool cli_default_pair(char *target, size_t target_size, char *draft, size_t draft_size);

/* The model and draft `run` and `chat` use: with no -m (*model_dir NULL) the bundled pair,
 * its draft unless --draft was given (the paths are written into the two buffers); then a
 * draft of "none" becomes NULL. Returns CLI_OK or the failure's exit status. */
int cli_pick_model(const char **model_dir, const char **draft, char *target_buf,
                   char *draft_buf, size_t buf_size);

typedef struct cli_talk {
    const char *dir;       /* the model directory */
    sp_tokenizer *tok;
    sp_chat *chat;         /* NULL when the model has no chat template */
    sp_model *m;
    sp_session *s;
    cli_spec spec;         /* spec.draft NULL = no speculation */
    int64_t n_ctx;
    const char *device;    /* --device (NULL: SPECULA_DEVICE, else auto) */
    const char *precision; /* --precision (NULL: fast) */
} cli_talk;

/* Opens the tokenizer and chat template of dir (need_template: fail without one). */
int cli_talk_open_text(cli_talk *t, const char *dir, bool need_template);
/* Opens the model, a session of n_ctx tokens (0 = min(max_position_embeddings, 4096)) and
 * the draft (t->spec.draft: a directory, "ngram", "self" or NULL). Progress goes to stderr
 * when it is a terminal. Returns a CLI exit code. */
int cli_talk_open_model(cli_talk *t, int64_t n_ctx, int threads);
void cli_talk_close(cli_talk *t);

typedef struct cli_msg {
    char *role, *content; /* malloc'd */
} cli_msg;

/* Renders msgs with add_generation_prompt true; *text and *ids are malloc'd. */
int cli_talk_render(cli_talk *t, const cli_msg *msgs, size_t n_msgs, char **text, int32_t **ids,
                    size_t *n_ids);

/* Generates after the session's current contents plus ids (plain or speculative). */
sp_status cli_talk_generate(cli_talk *t, const int32_t *ids, size_t n_ids, const sp_generate_params *gp,
                            sp_token_fn on_token, void *ctx, int32_t *out, sp_generate_stats *st,
                            sp_spec_stats *ss, sp_error *err);

/* Truncates the target session (and a model draft's) to at most n tokens; returns the
 * length both now hold. */
int64_t cli_talk_truncate(cli_talk *t, int64_t n);

/* One line on stderr ("specula: " lead ...): tokens/s, and acceptance when speculating. */
void cli_talk_summary(const cli_talk *t, const sp_generate_stats *st, const sp_spec_stats *ss, const char *lead);

/* Applies the options the user gave (--temp, --top-k, --top-p) over the model's sampling
 * defaults, and the seed. */
void cli_talk_sampling(sp_sampling_params *sp, const cli_opt *opts, const double *temp, const int64_t *top_k,
                       const double *top_p, const uint64_t *seed);

typedef struct cli_reply {
    sp_tokenizer *tok;
    sp_detokenizer *detok;
    FILE *out;
    bool tty;             /* dim thinking with ANSI codes rather than prefixing it */
    bool thinking;
    int mode;             /* 0 text, 1 a role header (<|start|>...), 2 a channel name */
    char channel[32];
    size_t channel_len;
    char *final;          /* the reply without thinking and control tokens (malloc'd) */
    size_t final_len, final_cap;
    volatile sig_atomic_t *stop; /* set (by a signal handler) to stop the reply */
    size_t n_tokens;
    sp_status status;
    sp_error err;
} cli_reply;

/* prompt_text: the rendered prompt (a template that opens a thinking block in the
 * generation prompt, as DeepSeek-R1's does, starts the reply inside it). */
int cli_reply_begin(cli_reply *r, sp_tokenizer *tok, FILE *out, const char *prompt_text,
                    volatile sig_atomic_t *stop);
bool cli_reply_token(void *ctx, int32_t token); /* an sp_token_fn */
void cli_reply_end(cli_reply *r);                /* flushes held-back text */
void cli_reply_free(cli_reply *r);

#endif
