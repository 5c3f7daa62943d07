/* forward_internal.h: the blocks of the forward pass, split by variant across files
 * (forward.c: the layer loop, GQA attention, dense MLP; forward_moe.c: expert blocks;
 * forward_mla.c: latent attention). All take a chunk of n consecutive tokens. */
#ifndef SP_MODEL_FORWARD_INTERNAL_H
#define SP_MODEL_FORWARD_INTERNAL_H

#include "runtime/session.h"

/* Whether the session has an observer. Building with SP_NO_TRACE_HOOKS removes the
 * checks altogether (only to measure what they cost: see docs/BENCHMARKS.md). */
#ifdef SP_NO_TRACE_HOOKS
#define SP_TRACE_ON(s) ((void)(s), 0)
#else
#define SP_TRACE_ON(s) ((s)->trace != NULL)
#endif

/* Calls the session's observer, if any. */
static inline void sp_trace_emit(sp_session *s, int layer, sp_op op, int64_t n, int64_t width,
                                 float *data)
{
    if (SP_TRACE_ON(s)) {
        sp_trace_event ev = {layer, op, s->n_past, n, width, data, s->chunk_tokens};
        s->trace(s->trace_ctx, &ev);
    }
}

/* xn [n, H] -> s->ffn [n, H] */
void sp_forward_moe(sp_session *s, int64_t l, int64_t n);
/* xn [n, H] -> s->o [n, H] (after o_proj); stores this chunk's k/v in the cache. */
void sp_forward_mla(sp_session *s, int64_t l, int64_t n);

#endif
