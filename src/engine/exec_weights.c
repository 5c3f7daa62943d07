/* exec_weights.c: the model's weights as its backend sees them (model->exec).
 *
 * On a device, every checkpoint shard's mapping goes to the device in one copy, in its
 * stored bytes (packed FP4/FP8 stays packed), each converted vector is copied once, and
 * every pointer of every weight view is rebased into those copies; expert tables are
 * copied too, so a kernel can pick an expert by an id it reads on the device. DeepSeek-V4
 * layers get rebased copies of their sp_dsv4_layer (but for the hash tables, which the
 * forward pass reads on the host). A pointer found in no region is a bug and fails
 * loading with the tensor's name.
 *
 * Alignment: a safetensors header is padded to 8 bytes only, so a shard's tensors can sit
 * 8 bytes off a 16-byte boundary in the file (every tensor of the llama-1b and gpt-oss
 * random checkpoints does), and a copy to an aligned allocation would keep them there: the
 * GPU matmuls then take their byte-load path (same values, about half the bandwidth). So
 * each shard's copy is placed REGION_ALIGN bytes into a slightly larger allocation at the
 * offset that puts most of its tensor bytes on a REGION_ALIGN boundary. Only addresses
 * change, never a byte of a weight.
 *
 * On a backend whose memory is the host's, exec holds the same views as the model (the
 * mapped checkpoint and the converted fp32 vectors) when every shard's tensors already sit
 * on HOST_ALIGN boundaries, or when the caller asked for the mapping (map_weights).
 * Otherwise the same copies are made in host memory, so that the CPU kernels' 32- and
 * 64-byte loads never straddle two cache lines (llama-1b, Emerald Rapids, 2 threads:
 * prefill 512 and decode 3-4% faster), and each shard's own pages of the mapping are
 * dropped after its copy. A host pointer found in no region (a host-only table) keeps
 * pointing where it did: the mapping stays valid. */
#include "engine/exec_weights.h"
#include "util/error.h"
#include "util/fileio.h"

#include <stdlib.h>
#include <string.h>

typedef struct region {
    const unsigned char *host;
    size_t n;
    const sp_mapped_file *file; /* a shard's mapping (host == file->data), else NULL */
    void *dev;   /* the copy of host[0]: base + shift */
    void *base;  /* the allocation (n + shift bytes), freed at the end */
    size_t shift;
} region;

#define REGION_ALIGN 256 /* cudaMalloc's alignment */

struct sp_exec_store {
    region *r;
    size_t n, cap;
    void **tables; /* expert tables and other device allocations */
    size_t n_tables, cap_tables;
    sp_layer *layers;
    sp_dsv4_layer *v4; /* [n_layers] DeepSeek-V4 layer copies, or NULL */
    const char *bad; /* name of a weight whose pointer is in no region */
    bool host;       /* copies in host memory: a pointer in no region stays as it is */
};

static sp_status push_region(sp_exec_store *s, const void *host, size_t n, size_t shift,
                             const sp_mapped_file *file, sp_error *err)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        region *p = realloc(s->r, cap * sizeof *p);
        if (!p)
            return sp_err(err, SP_ERR_NOMEM, "out of memory");
        s->r = p;
        s->cap = cap;
    }
    s->r[s->n++] = (region){host, n, file, NULL, NULL, shift};
    return SP_OK;
}

static sp_status push_table(sp_exec_store *s, void *dev, sp_error *err)
{
    if (s->n_tables == s->cap_tables) {
        size_t cap = s->cap_tables ? s->cap_tables * 2 : 16;
        void **p = realloc(s->tables, cap * sizeof *p);
        if (!p)
            return sp_err(err, SP_ERR_NOMEM, "out of memory");
        s->tables = p;
        s->cap_tables = cap;
    }
    s->tables[s->n_tables++] = dev;
    return SP_OK;
}

/* The device address of host pointer p (NULL stays NULL). */
static const void *rebase(sp_exec_store *s, const void *p, const char *what)
{
    if (!p)
        return NULL;
    const unsigned char *h = p;
    for (size_t i = 0; i < s->n; i++)
        if (h >= s->r[i].host && h < s->r[i].host + s->r[i].n)
            return (unsigned char *)s->r[i].dev + (h - s->r[i].host);
    if (s->host)
        return p;
    if (!s->bad)
        s->bad = what ? what : "(unnamed)";
    return NULL;
}

static void rebase_weight(sp_exec_store *s, sp_weight *w)
{
    if (w->format == SP_WF_NONE)
        return;
    w->data = rebase(s, w->data, w->name);
    w->scales = rebase(s, w->scales, w->name);
}

#define REBASE_VEC(s, field, name) ((field) = rebase((s), (field), (name)))

static sp_status rebase_experts(sp_backend *be, sp_exec_store *s, sp_layer *L, sp_error *err)
{
    size_t bytes = (size_t)L->n_experts * sizeof(sp_expert);
    sp_expert *tmp = malloc(bytes);
    if (!tmp)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    memcpy(tmp, L->experts, bytes);
    for (int64_t e = 0; e < L->n_experts; e++) {
        sp_expert *x = &tmp[e];
        rebase_weight(s, &x->gate);
        rebase_weight(s, &x->up);
        rebase_weight(s, &x->down);
        REBASE_VEC(s, x->gate_up_bias, x->gate.name);
        REBASE_VEC(s, x->down_bias, x->down.name);
    }
    void *dev = NULL;
    sp_status st = be->ops->alloc(be, bytes, &dev, err);
    if (st == SP_OK && (st = push_table(s, dev, err)) != SP_OK)
        be->ops->free(be, dev);
    else if (st == SP_OK)
        st = be->ops->upload(be, dev, tmp, bytes, err);
    if (st == SP_OK) {
        L->experts = dev;
        L->expert_steps = sp_expert_steps_of(tmp, L->n_experts);
    }
    free(tmp);
    return st;
}

static sp_status rebase_layer(sp_backend *be, sp_exec_store *s, sp_layer *L, sp_error *err)
{
    sp_weight *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wq_a, &L->wq_b, &L->wkv_a,
                         &L->wkv_b, &L->w_gate, &L->w_up, &L->w_down, &L->router,
                         &L->sh_gate, &L->sh_up, &L->sh_down};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
        rebase_weight(s, mats[i]);
    const float **vecs[] = {&L->attn_norm, &L->mlp_norm, &L->bq, &L->bk, &L->bv, &L->bo,
                            &L->q_norm, &L->k_norm, &L->sinks, &L->q_a_norm, &L->kv_a_norm,
                            &L->router_bias, &L->score_bias};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++)
        *vecs[i] = rebase(s, *vecs[i], L->wo.name ? L->wo.name : "layer vector");
    if (L->moe && L->experts)
        return rebase_experts(be, s, L, err);
    return SP_OK;
}

/* A DeepSeek-V4 layer's own matrices and vectors; tid2eid stays a host table. */
static void rebase_v4(sp_exec_store *s, sp_dsv4_layer *v)
{
    sp_weight *mats[] = {&v->wq_a, &v->wq_b, &v->wkv, &v->wo_a, &v->wo_b, &v->c_wkv, &v->c_wgate,
                         &v->i_wkv, &v->i_wgate, &v->i_wq_b, &v->i_wproj, &v->hc_attn_fn, &v->hc_ffn_fn};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
        rebase_weight(s, mats[i]);
    const float **vecs[] = {&v->q_norm, &v->kv_norm, &v->sinks, &v->c_ape, &v->c_norm, &v->i_ape,
                            &v->i_norm, &v->hc_attn_base, &v->hc_attn_scale, &v->hc_ffn_base,
                            &v->hc_ffn_scale};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++)
        *vecs[i] = rebase(s, *vecs[i], v->wq_a.name ? v->wq_a.name : "DeepSeek-V4 layer vector");
}

static sp_status rebase_v4_layers(sp_model *m, sp_exec_store *s, sp_error *err)
{
    if (!m->v4)
        return SP_OK;
    if (!(s->v4 = calloc((size_t)m->n_layers, sizeof *s->v4)))
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    for (int64_t l = 0; l < m->n_layers; l++) {
        if (!s->layers[l].v4)
            continue;
        s->v4[l] = *s->layers[l].v4;
        rebase_v4(s, &s->v4[l]);
        s->layers[l].v4 = &s->v4[l];
    }
    m->exec.hc_head_fn = m->hc_head_fn;
    rebase_weight(s, &m->exec.hc_head_fn);
    m->exec.hc_head_base = rebase(s, m->hc_head_base, "hc_head_base");
    m->exec.hc_head_scale = rebase(s, m->hc_head_scale, "hc_head_scale");
    return SP_OK;
}

#define UPLOAD_CHUNK ((size_t)256 << 20) /* bytes per upload call: the progress step */

/* The offset into an aligned allocation at which a shard's copy puts most of its tensor
 * bytes on a REGION_ALIGN boundary, among the multiples of SHIFT_STEP: a shift that is not
 * one would move tensors off their element alignment (an F32 scale tensor after an odd
 * number of FP8 bytes sits 4-aligned in the file and must stay so on the device, or its
 * loads fault with "misaligned address"), while every dtype is at most 8 bytes wide. */
#define SHIFT_STEP 8
static size_t shard_shift(const sp_safetensors *st)
{
    uint64_t bytes[REGION_ALIGN] = {0};
    if (!st->file.n_bytes)
        return 0;
    for (size_t i = 0; i < st->n_tensors; i++)
        bytes[(size_t)(st->tensors[i].data - st->file.data) % REGION_ALIGN] += st->tensors[i].n_bytes;
    size_t best = 0;
    for (size_t r = SHIFT_STEP; r < REGION_ALIGN; r += SHIFT_STEP)
        if (bytes[r] > bytes[best])
            best = r;
    return (REGION_ALIGN - best) % REGION_ALIGN;
}

/* Copies every shard mapping and converted vector to the device (on the host: reads each
 * shard from its file into the copy). */
static sp_status upload_regions(sp_model *m, sp_exec_store *s, sp_error *err)
{
    sp_backend *be = m->be;
    sp_status st = SP_OK;
    for (size_t i = 0; i < m->ckpt->n_shards && st == SP_OK; i++) {
        const sp_mapped_file *f = &m->ckpt->shards[i]->file;
        if (f->n_bytes)
            st = push_region(s, f->data, f->n_bytes, shard_shift(m->ckpt->shards[i]), f, err);
    }
    for (size_t i = 0; i < m->n_owned && st == SP_OK; i++)
        st = push_region(s, m->owned[i], (m->owned_n[i] ? m->owned_n[i] : 1) * sizeof(float), 0,
                         NULL, err);
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < s->n; i++)
        total += s->r[i].n;
    for (size_t i = 0; i < s->n && st == SP_OK; i++) {
        st = be->ops->alloc(be, s->r[i].n + s->r[i].shift, &s->r[i].base, err);
        if (st == SP_OK)
            s->r[i].dev = (char *)s->r[i].base + s->r[i].shift;
        for (size_t off = 0; st == SP_OK && off < s->r[i].n; off += UPLOAD_CHUNK) {
            size_t n = s->r[i].n - off < UPLOAD_CHUNK ? s->r[i].n - off : UPLOAD_CHUNK;
            if (s->host && s->r[i].file) /* read, not copied from the mapping: no page faults */
                st = sp_mapped_file_read(s->r[i].file, off, (char *)s->r[i].dev + off, n, err);
            else
                st = be->ops->upload(be, (char *)s->r[i].dev + off,
                                     (const char *)s->r[i].host + off, n, err);
            done += n;
            if (st == SP_OK && m->load_progress && (n == UPLOAD_CHUNK || done == total))
                m->load_progress(m->load_progress_ctx, done, total);
        }
    }
    if (st == SP_OK)
        st = be->ops->finish(be, err);
    return st;
}

/* The MTP pass's weights on a host-memory backend: exec with the module's head and norm
 * (its block is layers[n_layers], rebased with the others). */
static void mtp_exec(sp_model *m, sp_exec_store *s)
{
    m->exec_mtp = m->exec;
    m->exec_mtp.lm_head = m->mtp.head;
    m->exec_mtp.final_norm = m->mtp.head_norm;
    m->exec_mtp.hc_head_fn = m->mtp.hc_head_fn;
    m->exec_mtp.hc_head_base = m->mtp.hc_head_base;
    m->exec_mtp.hc_head_scale = m->mtp.hc_head_scale;
    if (!s)
        return;
    rebase_weight(s, &m->exec_mtp.lm_head);
    rebase_weight(s, &m->exec_mtp.hc_head_fn);
    m->exec_mtp.final_norm = rebase(s, m->exec_mtp.final_norm, "MTP head norm");
    m->exec_mtp.hc_head_base = rebase(s, m->exec_mtp.hc_head_base, "MTP hc_head_base");
    m->exec_mtp.hc_head_scale = rebase(s, m->exec_mtp.hc_head_scale, "MTP hc_head_scale");
}

static sp_status build_copies(sp_model *m, bool host, sp_error *err)
{
    sp_exec_store *s = calloc(1, sizeof *s);
    if (!s)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    m->exec_store = s;
    s->host = host;
    const int64_t n_blocks = m->n_layers + (host ? m->n_mtp : 0);
    sp_status st = upload_regions(m, s, err);
    if (st == SP_OK && !(s->layers = calloc((size_t)n_blocks, sizeof *s->layers)))
        st = sp_err(err, SP_ERR_NOMEM, "out of memory");
    if (st != SP_OK)
        return st;
    m->exec.tok_embd = m->tok_embd;
    m->exec.lm_head = m->lm_head;
    rebase_weight(s, &m->exec.tok_embd);
    rebase_weight(s, &m->exec.lm_head);
    m->exec.final_norm = rebase(s, m->final_norm, "model.norm.weight");
    memcpy(s->layers, m->layers, (size_t)n_blocks * sizeof *s->layers);
    for (int64_t l = 0; l < n_blocks && st == SP_OK; l++)
        st = rebase_layer(m->be, s, &s->layers[l], err);
    if (st == SP_OK)
        st = rebase_v4_layers(m, s, err);
    m->exec.layers = s->layers;
    if (st == SP_OK && host && m->n_mtp)
        mtp_exec(m, s);
    if (st == SP_OK && host) {
        for (size_t i = 0; i < m->ckpt->n_shards; i++)
            sp_mapped_file_release(&m->ckpt->shards[i]->file);
        for (size_t i = 0; i < s->n; i++)
            m->host_copy_bytes += s->r[i].n + s->r[i].shift;
    }
    if (st == SP_OK && s->bad)
        st = sp_err(err, SP_ERR_INTERNAL, "%s: weight '%s' lies outside the checkpoint mappings",
                    m->dir, s->bad);
    if (st == SP_OK)
        st = m->be->ops->finish(m->be, err);
    return st;
}

/* Whether a host-memory backend should compute on aligned copies: some shard's tensors
 * sit off HOST_ALIGN boundaries in the mapping, and the caller did not ask for it. */
#define HOST_ALIGN 64
static bool host_copies_pay(const sp_model *m)
{
    if (m->map_weights)
        return false;
    for (size_t i = 0; i < m->ckpt->n_shards; i++)
        if (shard_shift(m->ckpt->shards[i]) % HOST_ALIGN)
            return true;
    return false;
}

sp_status sp_exec_weights_build(sp_model *m, sp_error *err)
{
    if (!m->be->host_memory)
        return build_copies(m, false, err);
    if (host_copies_pay(m))
        return build_copies(m, true, err);
    m->exec = (sp_weights){m->tok_embd, m->lm_head, m->final_norm, m->layers,
                           m->hc_head_fn, m->hc_head_base, m->hc_head_scale};
    if (m->n_mtp) /* MTP passes run on host-memory backends only (sp_session_new_mtp) */
        mtp_exec(m, NULL);
    return SP_OK;
}

void sp_exec_weights_free(sp_model *m)
{
    sp_exec_store *s = m->exec_store;
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        if (s->r[i].base)
            m->be->ops->free(m->be, s->r[i].base);
    for (size_t i = 0; i < s->n_tables; i++)
        m->be->ops->free(m->be, s->tables[i]);
    free(s->r);
    free(s->tables);
    free(s->layers);
    free(s->v4);
    free(s);
    m->exec_store = NULL;
    m->host_copy_bytes = 0;
}

uint64_t sp_exec_weights_device_bytes(const sp_model *m)
{
    uint64_t b = 0;
    if (m->be->host_memory)
        return 0;
    for (size_t i = 0; i < m->ckpt->n_shards; i++)
        b += m->ckpt->shards[i]->file.n_bytes + shard_shift(m->ckpt->shards[i]);
    for (size_t i = 0; i < m->n_owned; i++)
        b += (uint64_t)m->owned_n[i] * sizeof(float);
    for (int64_t l = 0; l < m->n_layers; l++)
        b += (uint64_t)m->layers[l].n_experts * sizeof(sp_expert);
    return b;
}

sp_weight sp_exec_weight_of(const sp_model *m, const sp_weight *host)
{
    sp_weight w = *host;
    if (m->exec_store) {
        sp_exec_store *s = m->exec_store;
        const char *bad = s->bad;
        rebase_weight(s, &w);
        s->bad = bad; /* a miss here is reported by the caller through a NULL data */
    }
    return w;
}
