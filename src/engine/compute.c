/* compute.c: the size plan and allocation of a forward pass's working memory (see
 * compute.h). */
#include "engine/compute.h"
#include "util/ckd.h"
#include "util/error.h"

#include <stdatomic.h>
#include <stdlib.h>

uint64_t sp_next_serial(void)
{
    static _Atomic uint64_t next = 1;
    return atomic_fetch_add(&next, 1);
}

size_t sp_compute_inputs_bytes(const sp_compute *c, int64_t n, int64_t rope_dim)
{
    return (size_t)((const unsigned char *)c->rope_cs - (const unsigned char *)c->tokens) +
           (size_t)(n * rope_dim) * sizeof(float);
}

/* A bump allocator in bytes over one block (base NULL: only sizing), 64-byte granules,
 * overflow-checked. */
typedef struct plan {
    unsigned char *base;
    size_t used;
    bool overflow;
} plan;

static void *take(plan *p, size_t n, size_t elem)
{
    size_t bytes, end;
    if (sp_ckd_mul_size(&bytes, n, elem) || sp_ckd_add_size(&bytes, bytes, 63) ||
        sp_ckd_add_size(&end, p->used, bytes & ~(size_t)63)) {
        p->overflow = true;
        return NULL;
    }
    void *r = p->base ? p->base + p->used : NULL;
    p->used = end;
    return r;
}

static size_t rows(plan *p, int64_t cap, int64_t width)
{
    size_t n;
    if (width < 0 || sp_ckd_mul_size(&n, (size_t)cap, (size_t)width)) {
        p->overflow = true;
        return 0;
    }
    return n;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Widest dense MLP (gate/up) among dense layers and shared experts; widest expert. */
static void mlp_widths(const sp_model *m, int64_t *dense, int64_t *expert)
{
    *dense = max64(m->cfg->intermediate_size, 0);
    *expert = 0;
    for (int64_t l = 0; l < m->n_layers + m->n_mtp; l++) {
        const sp_layer *L = &m->layers[l];
        if (!L->moe)
            *dense = max64(*dense, L->w_gate.rows);
        else
            *expert = max64(*expert, L->expert_inter);
        if (L->sh_gate.format != SP_WF_NONE)
            *dense = max64(*dense, L->sh_gate.rows);
    }
}

static void lay_out_v4(const sp_model *m, int64_t cap, sp_compute *c, plan *p)
{
    const sp_dsv4_config *d = &m->cfg->dsv4;
    int64_t H = m->n_embd, N = d->hc_mult, hd = m->head_dim, rot = m->rope.dim;
    int64_t ih = d->index_n_heads, ihd = d->index_head_dim, G = d->o_groups, R = d->o_lora_rank;
    int64_t wide = max64(max64(2 * hd, 2 * ihd), ih * ihd);
    c->v4.x2 = take(p, rows(p, cap, N * H), 4);
    c->v4.hc_t = take(p, rows(p, cap, N * H), 4);
    c->v4.hc_mix = take(p, rows(p, cap, (2 + N) * N), 4);
    c->v4.hc_pre = take(p, rows(p, cap, N), 4);
    c->v4.hc_post = take(p, rows(p, cap, N), 4);
    c->v4.hc_comb = take(p, rows(p, cap, N * N), 4);
    c->v4.col = take(p, rows(p, cap, H), 4);
    c->v4.qres = take(p, rows(p, cap, m->cfg->q_lora_rank), 4);
    c->v4.a = take(p, rows(p, cap, wide), 4);
    c->v4.b = take(p, rows(p, cap, wide), 4);
    c->v4.iw = take(p, rows(p, cap, ih), 4);
    c->v4.sel = take(p, rows(p, cap, d->index_topk), 4);
    c->v4.g = take(p, rows(p, cap, m->q_dim / G), 4);
    c->v4.g2 = take(p, rows(p, cap, R), 4);
    c->v4.oa = take(p, rows(p, cap, G * R), 4);
    c->v4.cs2 = take(p, rows(p, cap, rot), 4);
    c->v4.ecs = take(p, rows(p, cap + 1, rot), 4);
    c->v4.head = take(p, rows(p, cap, H), 4);
}

static void lay_out(const sp_model *m, int64_t cap, sp_compute *c, plan *p)
{
    int64_t H = m->n_embd, dense, expert;
    mlp_widths(m, &dense, &expert);
    int64_t E = m->cfg->n_experts, K = m->cfg->n_experts_per_tok;
    const sp_dsv4_config *d = &m->cfg->dsv4;
    int64_t N = m->arch->attn == SP_ATTN_DSV4 ? d->hc_mult : 1;
    c->x = take(p, rows(p, cap, N * H), 4);
    c->xn = take(p, rows(p, cap, H), 4);
    c->q = take(p, rows(p, cap, m->q_dim), 4);
    c->k = take(p, rows(p, cap, m->kv_dim_k), 4);
    c->v = take(p, rows(p, cap, m->kv_dim_v), 4);
    c->att = take(p, rows(p, cap, m->n_heads * m->v_dim), 4);
    c->o = take(p, rows(p, cap, H), 4);
    c->gate = take(p, rows(p, cap, dense), 4);
    c->up = take(p, rows(p, cap, dense), 4);
    c->ffn = take(p, rows(p, cap, H), 4);
    if (m->arch->attn == SP_ATTN_MLA) {
        int64_t nh = m->n_heads;
        c->mla_a = take(p, rows(p, cap, max64(m->mla_q_lora, m->kv_dim_k)), 4);
        c->mla_b = take(p, rows(p, cap, nh * (m->mla_nope + m->mla_rope)), 4);
        c->mla_c = take(p, rows(p, cap, nh * m->mla_v), 4);
        c->mla_t = take(p, rows(p, cap, m->mla_kv_lora), 4);
        c->mla_u = take(p, rows(p, cap, m->mla_v), 4);
    }
    if (m->arch->attn == SP_ATTN_DSV4)
        lay_out_v4(m, cap, c, p);
    if (m->n_mtp) {
        c->mtp_h = take(p, rows(p, cap, sp_model_hidden_width(m)), 4);
        if (m->arch->attn != SP_ATTN_DSV4)
            c->mtp_in = take(p, rows(p, cap, 2 * H), 4);
    }
    c->tokens = take(p, (size_t)cap, 4);
    c->pos = take(p, (size_t)cap, 4);
    c->rope_cs = take(p, rows(p, cap, m->rope.dim), 4);
    c->logits = take(p, rows(p, SP_LOGIT_ROWS, m->n_vocab), 4);
    c->logit_ids = take(p, (size_t)SP_LOGIT_ROWS, 4);
    c->sample_reqs = take(p, (size_t)SP_LOGIT_ROWS, sizeof(sp_sample_req));
    c->spec_reqs = take(p, (size_t)2 * SP_LOGIT_ROWS, sizeof(sp_sample_req));
    c->spec_args = take(p, (size_t)SP_LOGIT_ROWS / 2, sizeof(sp_spec_args));
    if (E > 0 && K > 0) {
        c->router = take(p, rows(p, cap, E), 4);
        c->moe_w = take(p, rows(p, cap, K), 4);
        c->moe_ids = take(p, rows(p, cap, K), 4);
        c->moe_scratch = take(p, sp_moe_scratch_bytes(cap, K, E, H, expert), 1);
    }
}

uint64_t sp_compute_bytes(const sp_model *m, int64_t cap, bool *overflow)
{
    sp_compute c = {0};
    plan p = {0};
    lay_out(m, cap, &c, &p);
    *overflow = p.overflow;
    return p.overflow ? 0 : (uint64_t)p.used;
}

sp_status sp_compute_new(sp_model *m, int64_t cap, sp_compute **out, sp_error *err)
{
    *out = NULL;
    bool ovf;
    uint64_t bytes = sp_compute_bytes(m, cap, &ovf);
    if (ovf)
        return sp_err(err, SP_ERR_NOMEM, "buffers for %lld-token passes: size overflows",
                      (long long)cap);
    sp_compute *c = calloc(1, sizeof *c);
    if (!c)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    c->be = m->be;
    c->cap = cap;
    c->serial = sp_next_serial();
    sp_status st = SP_OK;
    if (m->arch->attn == SP_ATTN_DSV4) {
        size_t rot = (size_t)(m->rope.dim ? m->rope.dim : 1);
        c->v4.h_cs2 = malloc((size_t)cap * rot * sizeof(float));
        c->v4.h_ecs = malloc((size_t)(cap + 1) * rot * sizeof(float));
        c->v4.h_ids = malloc((size_t)cap * (size_t)m->cfg->n_experts_per_tok * sizeof(int32_t));
        if (!c->v4.h_cs2 || !c->v4.h_ecs || !c->v4.h_ids)
            st = sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    if (st == SP_OK)
        st = m->be->ops->alloc(m->be, (size_t)bytes, &c->mem, err);
    if (st != SP_OK) {
        sp_compute_free(c);
        return st;
    }
    plan p = {c->mem, 0, false};
    lay_out(m, cap, c, &p);
    /* the host mirror of the inputs, laid out as in backend memory (sizes checked above) */
    const unsigned char *t0 = (const unsigned char *)c->tokens;
    c->h_inputs = calloc(1, sp_compute_inputs_bytes(c, cap, m->rope.dim) + 64);
    if (!c->h_inputs) {
        sp_compute_free(c);
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    c->h_tokens = (int32_t *)(void *)c->h_inputs;
    c->h_pos = (int32_t *)(void *)(c->h_inputs + ((const unsigned char *)c->pos - t0));
    c->h_rope_cs = (float *)(void *)(c->h_inputs + ((const unsigned char *)c->rope_cs - t0));
    *out = c;
    return SP_OK;
}

void sp_compute_free(sp_compute *c)
{
    if (!c)
        return;
    if (c->mem)
        c->be->ops->free(c->be, c->mem);
    free(c->segs);
    free(c->attn);
    free(c->h_inputs);
    free(c->rec_key);
    free(c->h_view);
    free(c->v4.h_cs2);
    free(c->v4.h_ecs);
    free(c->v4.h_ids);
    free(c);
}

float *sp_compute_view_staging(sp_compute *c, size_t n)
{
    if (n > c->h_view_floats) {
        float *p = realloc(c->h_view, n * sizeof(float));
        if (!p)
            return NULL;
        c->h_view = p;
        c->h_view_floats = n;
    }
    return c->h_view;
}
