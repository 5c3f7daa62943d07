/* stop.h: when generation ends — one rule for plain (generate.c) and speculative
 * (speculative.c) decoding, since "greedy speculative == plain" depends on both stopping
 * at the same token. After each emitted token, in this order: the caller's callback asked
 * to stop ("callback"), an end-of-sequence id unless ignore_eos ("eos"), n_predict tokens
 * generated ("length"). Running out of context ("context") is checked by the loops
 * before they evaluate the next token. */
#ifndef SP_RUNTIME_STOP_H
#define SP_RUNTIME_STOP_H

#include "model/model.h"

typedef struct sp_stop_rules {
    const sp_model *m;
    const sp_generate_params *gp;
    sp_token_fn on_token;
    void *ctx;
} sp_stop_rules;

/* Records tok (out_tokens may be NULL) and tells whether generation goes on. */
bool sp_stop_emit(const sp_stop_rules *r, int32_t tok, int32_t *out_tokens,
                  sp_generate_stats *stats);

#endif
