/* forward_chain.c: greedy decoding of one sequence with each step's token fed on the device
 * (see forward.h, sp_forward_greedy_chain).
 *
 * A step of plain greedy decoding is a round trip: the host waits for the pick, then
 * uploads it as the next step's token and launches that step, and the GPU idles meanwhile
 * (25 us a step on an H200 between one recorded step's end and the next one's start, 2.5%
 * of a llama-1b step). Here step i + 1 reads its token from where step i's device pick left
 * it (the compute buffers' logit_ids[0]) and is queued before the host waits for pick i:
 * the GPU runs the steps back to back while the host reads the picks behind them. The
 * picks are the same (the same ops on the same values: only where the token id comes from
 * differs); when the caller stops early, the one step queued ahead has written cache rows
 * past the sequence's length, which the next evaluation overwrites (as a rejected draft's). */
#include "engine/forward.h"
#include "engine/forward_internal.h"
#include "util/error.h"

#include <pthread.h>

#define CHAIN_AHEAD 2 /* steps queued before the host waits for the oldest one's pick */

bool sp_forward_chain_ok(const sp_model *m, const sp_observer *obs)
{
    const sp_backend_ops *o = m->be->ops;
    return o->logits_argmax && o->upload_queued && o->download_queued && o->download_wait &&
           m->arch->attn != SP_ATTN_DSV4 && !obs && m->compute && m->n_vocab > 0;
}

/* Queues step i (position pos0 + i; token `first` for i == 0, else the pick before) and the
 * read back of its pick into slot i % CHAIN_AHEAD. */
static sp_status queue_step(sp_model *m, sp_kv *kv, int64_t pos0, int32_t first, int64_t i,
                            sp_error *err)
{
    int32_t pick = -1; /* written only by passes that read their pick back */
    sp_seq_eval q = {.kv = kv, .pos0 = pos0 + i, .tokens = &first, .n = 1, .last_id = &pick};
    sp_status st = sp_forward_queue_step(m, &q, i > 0, err);
    if (st == SP_OK)
        st = m->be->ops->download_queued(m->be, (int)(i % CHAIN_AHEAD), m->compute->logit_ids,
                                         sizeof(int32_t), err);
    return st;
}

sp_status sp_forward_greedy_chain(sp_model *m, sp_kv *kv, int64_t pos0, int32_t first,
                                  int64_t max_steps, sp_chain_cb cb, void *ctx,
                                  int64_t *n_steps, sp_error *err)
{
    *n_steps = 0;
    if (!sp_forward_chain_ok(m, NULL))
        return sp_err(err, SP_ERR_INTERNAL, "greedy chain on a backend without device picks");
    if (first < 0 || first >= m->n_vocab || max_steps < 0 || pos0 < 0 ||
        max_steps > kv->n_ctx - pos0)
        return sp_err(err, SP_ERR_INTERNAL, "greedy chain of %lld steps from position %lld",
                      (long long)max_steps, (long long)pos0);
    sp_backend *be = m->be;
    pthread_mutex_lock(&m->lock);
    sp_status st = SP_OK;
    int64_t issued = 0, done = 0;
    bool more = true; /* the caller wants further picks */
    while (st == SP_OK) {
        if (more && issued < max_steps && issued - done < CHAIN_AHEAD) {
            st = queue_step(m, kv, pos0, first, issued, err);
            issued++;
            continue;
        }
        if (!more || done == issued)
            break;
        int32_t pick = -1;
        st = be->ops->download_wait(be, (int)(done % CHAIN_AHEAD), &pick, sizeof pick, err);
        if (st != SP_OK)
            break;
        if (pick < 0 || pick >= m->n_vocab) {
            st = sp_err(err, SP_ERR_INTERNAL, "step %lld of a greedy chain picked id %d",
                        (long long)done, pick);
            break;
        }
        done++;
        more = !cb || cb(ctx, pick);
    }
    /* the queued steps drain; a failure (of a step queued ahead) surfaces here */
    sp_status fin = be->ops->finish(be, st == SP_OK ? err : NULL);
    pthread_mutex_unlock(&m->lock);
    *n_steps = done;
    return st != SP_OK ? st : fin;
}
