/* model_mem.c: memory planning. Before a model is used we add up what it will hold
 * (resident weight bytes, the KV cache for the requested context, per-pass scratch) and
 * compare with what the machine can give (MemAvailable, or SPECULA_MEM_LIMIT_BYTES when
 * set, which tests use to simulate a small machine). */
#include "model/load_internal.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CTX 4096
#define DEFAULT_BATCH 256

static uint64_t mem_available(void)
{
    const char *lim = getenv("SPECULA_MEM_LIMIT_BYTES");
    if (lim && *lim)
        return strtoull(lim, NULL, 10);
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return UINT64_MAX;
    char line[256];
    uint64_t kb = 0;
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", (unsigned long long *)&kb) == 1) {
            found = true;
            break;
        }
    fclose(f);
    return found ? kb * 1024ull : UINT64_MAX;
}

uint64_t sp_model_session_bytes(const sp_model *m, int64_t n_ctx, int64_t n_batch)
{
    if (n_ctx <= 0)
        n_ctx = m->cfg->max_pos < DEFAULT_CTX ? m->cfg->max_pos : DEFAULT_CTX;
    if (n_batch <= 0)
        n_batch = DEFAULT_BATCH;
    uint64_t kv = (uint64_t)m->n_layers * (uint64_t)n_ctx *
                  (uint64_t)(m->kv_dim_k + m->kv_dim_v) * sizeof(float);
    int64_t widest = m->n_embd;
    int64_t cand[] = {m->q_dim, m->kv_dim_k, m->kv_dim_v, m->cfg->intermediate_size,
                      m->cfg->moe_intermediate_size * (m->cfg->n_experts_per_tok + 1) * 2,
                      m->n_heads * m->v_dim};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
        if (cand[i] > widest)
            widest = cand[i];
    uint64_t scratch = (uint64_t)n_batch * (uint64_t)widest * 12u * sizeof(float);
    uint64_t logits = (uint64_t)n_batch * (uint64_t)m->n_vocab * sizeof(float);
    /* MoE: every selection's expert output is kept until the weighted sum */
    uint64_t moe = (uint64_t)n_batch * (uint64_t)m->cfg->n_experts_per_tok * (uint64_t)m->n_embd *
                   sizeof(float);
    scratch += moe;
    uint64_t attn = 64ull * (uint64_t)n_ctx * sizeof(float);
    return kv + scratch + logits + attn;
}

sp_status sp_model_check_memory(const sp_model *m, int64_t n_ctx, uint64_t reserved, bool skip,
                                sp_error *err)
{
    if (n_ctx > m->cfg->max_pos)
        return sp_err(err, SP_ERR_LIMIT,
                      "%s: requested context %lld exceeds max_position_embeddings %lld",
                      m->cfg->path, (long long)n_ctx, (long long)m->cfg->max_pos);
    uint64_t own = m->weight_bytes + sp_model_session_bytes(m, n_ctx, 0);
    uint64_t have = mem_available();
    if (!skip && own + reserved > have) {
        long long ctx = n_ctx > 0 ? n_ctx : (m->cfg->max_pos < DEFAULT_CTX ? m->cfg->max_pos : DEFAULT_CTX);
        if (reserved)
            return sp_err(err, SP_ERR_NOMEM,
                          "%s: needs about %.1f MiB (weights %.1f MiB + KV cache and buffers for %lld "
                          "tokens) on top of %.1f MiB already budgeted (the target model), but only "
                          "%.1f MiB is available",
                          m->dir, own / 1048576.0, m->weight_bytes / 1048576.0, ctx,
                          reserved / 1048576.0, have / 1048576.0);
        return sp_err(err, SP_ERR_NOMEM,
                      "%s: needs about %.1f MiB (weights %.1f MiB + KV cache and buffers for "
                      "%lld tokens) but only %.1f MiB is available",
                      m->dir, own / 1048576.0, m->weight_bytes / 1048576.0, ctx, have / 1048576.0);
    }
    return SP_OK;
}

uint64_t sp_model_budget_bytes(const sp_model *m, int64_t n_ctx)
{
    return m->weight_bytes + sp_model_session_bytes(m, n_ctx, 0);
}
