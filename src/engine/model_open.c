/* model_open.c: opening a model for execution — load and bind (model/), open the backend,
 * check that weights + a session fit, put the weights on the backend — and memory
 * planning. The check adds up what will be allocated, from the same plans that allocate
 * it (kv_cache.c, compute.c): resident weight bytes, the KV cache for the requested
 * context, the pass buffers, and compares with what the device can give (MemAvailable on
 * the CPU, free device memory on a GPU, or SPECULA_MEM_LIMIT_BYTES when set, which tests
 * use to simulate a small machine). */
#include "engine/compute.h"
#include "engine/exec_weights.h"
#include "engine/kv_cache.h"
#include "backend/backend_cpu.h"
#include "kernels/cpu/cpu_isa.h"
#include "util/ckd.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CTX 4096

sp_model_params sp_model_default_params(void)
{
    sp_model_params p = {0};
    return p;
}

int64_t sp_model_default_ctx(const sp_model *m)
{
    return m->cfg->max_pos < DEFAULT_CTX ? m->cfg->max_pos : DEFAULT_CTX;
}

static uint64_t host_available(void)
{
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

static uint64_t mem_available(const sp_backend *be)
{
    const char *lim = getenv("SPECULA_MEM_LIMIT_BYTES");
    if (lim && *lim)
        return strtoull(lim, NULL, 10);
    return be && !be->host_memory ? be->ops->free_bytes((sp_backend *)be) : host_available();
}

int64_t sp_model_default_batch(const sp_model *m)
{
    return m->be && !m->be->host_memory ? SP_DEFAULT_BATCH_GPU : SP_DEFAULT_BATCH;
}

uint64_t sp_model_session_bytes(const sp_model *m, int64_t n_ctx, int64_t n_batch)
{
    if (n_ctx <= 0)
        n_ctx = sp_model_default_ctx(m);
    if (n_batch <= 0)
        n_batch = sp_model_default_batch(m);
    if (n_batch > n_ctx)
        n_batch = n_ctx;
    bool o1, o2;
    uint64_t kv = sp_kv_bytes(m, n_ctx, &o1), pass = sp_compute_bytes(m, n_batch, &o2), sum;
    /* the CPU backend's attention keeps a score row per thread and position */
    uint64_t scores = (uint64_t)(m->be && m->be->host_memory ? 64 : 0) * (uint64_t)n_ctx * 4u;
    if (o1 || o2 || sp_ckd_add_u64(&sum, kv, pass) || sp_ckd_add_u64(&sum, sum, scores))
        return UINT64_MAX;
    return sum;
}

uint64_t sp_model_budget_bytes(const sp_model *m, int64_t n_ctx)
{
    uint64_t s = sp_model_session_bytes(m, n_ctx, 0), sum;
    uint64_t w = m->be && !m->be->host_memory ? sp_exec_weights_device_bytes(m) : m->weight_bytes;
    return sp_ckd_add_u64(&sum, w, s) ? UINT64_MAX : sum;
}

static sp_status check_memory(const sp_model *m, int64_t n_ctx, uint64_t reserved, bool skip,
                              sp_error *err)
{
    if (n_ctx > m->cfg->max_pos)
        return sp_err(err, SP_ERR_LIMIT,
                      "%s: requested context %lld exceeds max_position_embeddings %lld",
                      m->cfg->path, (long long)n_ctx, (long long)m->cfg->max_pos);
    uint64_t own = sp_model_budget_bytes(m, n_ctx);
    uint64_t have = mem_available(m->be), need;
    if (skip)
        return SP_OK;
    if (own == UINT64_MAX || sp_ckd_add_u64(&need, own, reserved) || need > have) {
        long long ctx = n_ctx > 0 ? n_ctx : sp_model_default_ctx(m);
        char extra[128] = "";
        if (reserved)
            snprintf(extra, sizeof extra, " on top of %.1f MiB already budgeted (the target model)",
                     reserved / 1048576.0);
        return sp_err(err, SP_ERR_NOMEM,
                      "%s: needs about %.1f MiB on %s (weights %.1f MiB + KV cache and buffers for "
                      "%lld tokens)%s, but only %.1f MiB is available",
                      m->dir, own / 1048576.0, m->be->device_name, m->weight_bytes / 1048576.0,
                      ctx, extra, have / 1048576.0);
    }
    return SP_OK;
}

sp_status sp_model_open(const char *dir, const sp_model_params *params, sp_model **out,
                        sp_error *err)
{
    *out = NULL;
    sp_model_params p = params ? *params : sp_model_default_params();
    sp_model *m;
    sp_status st = sp_model_load(dir, &m, err);
    if (st != SP_OK)
        return st;
    pthread_mutex_init(&m->lock, NULL);
    m->load_progress = p.load_progress;
    m->load_progress_ctx = p.load_progress_ctx;
    m->map_weights = p.map_weights;
    st = sp_backend_open(p.device, p.n_threads, &m->be, err);
    if (st == SP_OK && p.precision == SP_PRECISION_FAST && m->be->ops->set_precision)
        m->precision = m->be->ops->set_precision(m->be, SP_PRECISION_FAST);
    if (st == SP_OK && m->arch->attn == SP_ATTN_DSV4 && !m->be->ops->dsv4_attention)
        st = sp_err(err, SP_ERR_UNSUPPORTED,
                    "%s: the %s backend has no DeepSeek-V4 ops (device %s; use --device cpu)", dir,
                    m->be->ops->name, m->be->device_name);
    if (st == SP_OK)
        st = check_memory(m, p.n_ctx, p.reserved_bytes, p.skip_mem_check, err);
    if (st == SP_OK)
        st = sp_exec_weights_build(m, err);
    if (st != SP_OK) {
        sp_model_close(m);
        return st;
    }
    *out = m;
    return SP_OK;
}

void sp_model_close(sp_model *m)
{
    if (!m)
        return;
    sp_compute_free(m->compute);
    if (m->be)
        sp_exec_weights_free(m);
    sp_backend_close(m->be);
    pthread_mutex_destroy(&m->lock);
    sp_model_unload(m);
}

const char *sp_model_device(const sp_model *m) { return m->be->device_name; }
uint64_t sp_model_device_bytes(const sp_model *m) { return sp_exec_weights_device_bytes(m); }
int sp_cuda_device_count(void) { return sp_backend_cuda_devices(); }

double sp_model_copy_bandwidth(const sp_model *m)
{
    return m->be->ops->copy_bandwidth ? m->be->ops->copy_bandwidth(m->be) : 0.0;
}
sp_precision sp_model_precision(const sp_model *m) { return m->precision; }
const char *sp_cpu_kernels_name(void) { return sp_isa_name(sp_isa_active()); }
