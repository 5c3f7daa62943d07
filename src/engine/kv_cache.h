/* kv_cache.h: one sequence's KV cache, in backend memory.
 *
 * Per layer: k [n_ctx, kv_dim_k], v [n_ctx, kv_dim_v], fp32, position-major (MLA caches
 * only the latent rows [c_kv, k_rot] in k; v is unused). One allocation. Rolling back a
 * sequence (speculative decoding) only lowers its length: later rows are overwritten by
 * the next evaluation. */
#ifndef SP_ENGINE_KV_CACHE_H
#define SP_ENGINE_KV_CACHE_H

#include "model/model.h"

typedef struct sp_kv {
    int64_t n_ctx, n_layers;
    float **k, **v; /* [n_layers] pointers into `mem` */
    void *mem;      /* backend memory */
    sp_backend *be;
    uint64_t serial; /* names this cache for recorded passes (sp_next_serial) */
} sp_kv;

/* Bytes the cache of n_ctx positions takes (0 with *overflow set when it overflows). */
uint64_t sp_kv_bytes(const sp_model *m, int64_t n_ctx, bool *overflow);
sp_status sp_kv_new(sp_model *m, int64_t n_ctx, sp_kv **out, sp_error *err);
/* A cache for layers [first, first + count) only (k[l], v[l] NULL below first): the MTP
 * module's block, layer n_layers, has a cache of its own (forward_mtp.c). */
sp_status sp_kv_new_range(sp_model *m, int64_t n_ctx, int64_t first, int64_t count, sp_kv **out,
                          sp_error *err);
void sp_kv_free(sp_kv *kv);

#endif
