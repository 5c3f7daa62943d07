/* model_walk.h: visiting every weight a loaded model uses — matrices as bound (dense or
 * packed) and the fp32 vectors converted at load (norms, biases, sinks) — with the
 * checkpoint name of each, for self-checks and reports. */
#ifndef SP_MODEL_MODEL_WALK_H
#define SP_MODEL_MODEL_WALK_H

#include "model/model.h"

typedef struct sp_walk_fns {
    /* a matrix: name is the checkpoint tensor's */
    void (*matrix)(void *ctx, const char *name, const sp_weight *w);
    /* an fp32 vector of n values */
    void (*vector)(void *ctx, const char *name, const float *v, int64_t n);
} sp_walk_fns;

void sp_model_walk(const sp_model *m, const sp_walk_fns *fns, void *ctx);

#endif
