/* cli_spec.h: the speculative-decoding options shared by `generate` and `bench`
 * (--draft DIR|ngram|self|mtp, --draft-k, --draft-p-min, --draft-ngram, --no-draft-gate):
 * opening and checking the draft, and reporting what speculation did. */
#ifndef SP_TOOLS_CLI_SPEC_H
#define SP_TOOLS_CLI_SPEC_H

#include "cli.h"

#include <stdio.h>

typedef struct cli_spec {
    const char *draft;    /* NULL = no speculation */
    int64_t k;
    double p_min;
    int64_t ngram;        /* longest n-gram for --draft ngram */
    bool no_gate;
    const char *draft_device; /* NULL = the target's device */
    sp_model *draft_model; /* --draft DIR */
    sp_session *draft_session;
    sp_tokenizer *draft_tok;
    sp_spec_params params;
} cli_spec;

/* Options to splice into a command's option table (6 entries). */
#define CLI_SPEC_OPTS(c)                                                                         \
    {"--draft", NULL, CLI_STR, &(c).draft, "speculate: a draft model DIR, 'ngram', 'self' or 'mtp'", 0}, \
    {"--draft-k", NULL, CLI_INT, &(c).k,                                                          \
     "most draft tokens per round (default: the draft's num_assistant_tokens, else 4)", 0},     \
    {"--draft-p-min", NULL, CLI_FLOAT, &(c).p_min, "end a draft below this draft probability", 0}, \
    {"--draft-ngram", NULL, CLI_INT, &(c).ngram, "longest n-gram for --draft ngram (default 3)", 0}, \
    {"--no-draft-gate", NULL, CLI_FLAG, &(c).no_gate, "keep k fixed; never pause drafting", 0}, \
    {"--draft-device", NULL, CLI_STR, &(c).draft_device, "device of a draft model (default: the target's)", 0}

/* Opens what --draft names for `target` (tokenizer: the target's, or NULL) with a KV cache
 * of n_ctx tokens; a draft model is budgeted on top of the target and checked for
 * compatibility; 'mtp' opens target_session's MTP session (the session must be empty).
 * Fills c->params. Returns a CLI exit code. */
int cli_spec_open(cli_spec *c, sp_model *target, sp_session *target_session, const char *target_dir,
                  sp_tokenizer *target_tok, int64_t n_ctx, const sp_model_params *target_params);
void cli_spec_close(cli_spec *c);

/* The "spec" JSON object (no trailing newline) and the one-line summary. */
void cli_spec_print_json(FILE *f, const sp_spec_stats *s);
void cli_spec_print_summary(FILE *f, const sp_spec_stats *s);

#endif
