/* kv_cache.c: allocating a sequence's KV cache on the model's backend (see kv_cache.h). */
#include "engine/kv_cache.h"
#include "engine/compute.h"
#include "util/ckd.h"
#include "util/error.h"

#include <stdlib.h>

static uint64_t range_bytes(const sp_model *m, int64_t n_ctx, int64_t count, bool *overflow)
{
    size_t floats, bytes;
    *overflow = n_ctx < 0 || count < 0 ||
                sp_ckd_mul3_size(&floats, (size_t)count, (size_t)n_ctx,
                                 (size_t)(m->kv_dim_k + m->kv_dim_v)) ||
                sp_ckd_mul_size(&bytes, floats, sizeof(float));
    return *overflow ? 0 : (uint64_t)bytes;
}

uint64_t sp_kv_bytes(const sp_model *m, int64_t n_ctx, bool *overflow)
{
    return range_bytes(m, n_ctx, m->n_layers, overflow);
}

sp_status sp_kv_new_range(sp_model *m, int64_t n_ctx, int64_t first, int64_t count, sp_kv **out,
                          sp_error *err)
{
    *out = NULL;
    bool ovf;
    uint64_t bytes = range_bytes(m, n_ctx, count, &ovf);
    if (ovf || first < 0 || count < 1)
        return sp_err(err, SP_ERR_NOMEM, "a KV cache of %lld positions: size overflows",
                      (long long)n_ctx);
    sp_kv *kv = calloc(1, sizeof *kv);
    if (!kv)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    kv->n_ctx = n_ctx;
    kv->n_layers = first + count;
    kv->be = m->be;
    kv->serial = sp_next_serial();
    kv->k = calloc((size_t)kv->n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)kv->n_layers, sizeof *kv->v);
    sp_status st = kv->k && kv->v ? SP_OK : sp_err(err, SP_ERR_NOMEM, "out of memory");
    if (st == SP_OK)
        st = m->be->ops->alloc(m->be, (size_t)bytes, &kv->mem, err);
    if (st != SP_OK) {
        sp_kv_free(kv);
        return st;
    }
    size_t per_layer = (size_t)n_ctx * (size_t)(m->kv_dim_k + m->kv_dim_v);
    for (int64_t l = 0; l < count; l++) {
        kv->k[first + l] = (float *)kv->mem + (size_t)l * per_layer;
        kv->v[first + l] = kv->k[first + l] + (size_t)n_ctx * (size_t)m->kv_dim_k;
    }
    *out = kv;
    return SP_OK;
}

sp_status sp_kv_new(sp_model *m, int64_t n_ctx, sp_kv **out, sp_error *err)
{
    return sp_kv_new_range(m, n_ctx, 0, m->n_layers, out, err);
}

void sp_kv_free(sp_kv *kv)
{
    if (!kv)
        return;
    if (kv->mem)
        kv->be->ops->free(kv->be, kv->mem);
    free(kv->k);
    free(kv->v);
    free(kv);
}
