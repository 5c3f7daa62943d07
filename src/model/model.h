/* model.h: the loaded model (behind the public sp_model handle).
 *
 * Ownership: the model owns its config, its checkpoint mappings, the small fp32 vectors
 * it converts at load (norm weights, biases, sinks: a few KB per layer), its backend and
 * the weights as the backend sees them (`exec`: the same views on the CPU, one copy of
 * each checkpoint shard in device memory on a GPU, never expanded). The host views
 * (tok_embd, layers, ...) serve loading, checks and inspection; the forward pass reads
 * only `exec`. After sp_model_open the weights are read-only; a forward pass takes the
 * model's lock, so sessions of one model may run on different threads. */
#ifndef SP_MODEL_MODEL_H
#define SP_MODEL_MODEL_H

#include "backend/backend.h"
#include "format/checkpoint.h"
#include "format/hf_config.h"
#include "kernels/weight.h"
#include "model/arch.h"
#include "model/quant.h"
#include "model/rope.h"

#include <pthread.h>

/* DeepSeek-V4's per-layer tensors (model_load_dsv4.c; the math in forward_dsv4.c). */
typedef struct sp_dsv4_layer {
    int64_t rate;         /* compression rate; 0: sliding window only */
    bool indexer, hash;   /* CSA (lightning indexer); hash-routed MoE */
    sp_weight wq_a, wq_b, wkv, wo_a, wo_b; /* wo_a [groups * o_lora, heads * hd / groups] */
    const float *q_norm, *kv_norm, *sinks;
    sp_weight c_wkv, c_wgate;             /* compressor [cw, H], cw = 2 hd (CSA) or hd */
    const float *c_ape, *c_norm;          /* [rate, cw], [hd] */
    sp_weight i_wkv, i_wgate, i_wq_b, i_wproj; /* indexer [2 ihd, H], .., [ih ihd, q_lora], [ih, H] */
    const float *i_ape, *i_norm;          /* [rate, 2 ihd], [ihd] */
    sp_weight hc_attn_fn, hc_ffn_fn;      /* [(2 + N) N, N H] */
    const float *hc_attn_base, *hc_attn_scale, *hc_ffn_base, *hc_ffn_scale; /* [(2+N)N], [3] */
    const int32_t *tid2eid;               /* hash layers: [V, k] */
} sp_dsv4_layer;

typedef struct sp_layer {
    const float *attn_norm, *mlp_norm; /* [H] */
    bool sliding;                      /* sliding-window attention layer */

    /* GQA attention */
    sp_weight wq, wk, wv, wo;
    const float *bq, *bk, *bv, *bo; /* NULL without biases */
    const float *q_norm, *k_norm;   /* [head_dim] (Qwen3) or NULL */
    const float *sinks;             /* [n_heads] (gpt-oss) or NULL */

    /* MLA attention (DeepSeek) */
    sp_weight wq_a, wq_b, wkv_a, wkv_b; /* wq used instead of wq_a/wq_b when q_lora_rank = 0 */
    const float *q_a_norm, *kv_a_norm;

    /* feed-forward */
    bool moe;
    sp_weight w_gate, w_up, w_down; /* dense SwiGLU */
    int64_t n_experts, top_k, expert_inter;
    sp_weight router;               /* [E, H] */
    const float *router_bias;       /* [E] (gpt-oss) */
    const float *score_bias;        /* [E] e_score_correction_bias (DeepSeek) */
    sp_expert *experts;             /* [E] */
    sp_expert_steps expert_steps;   /* of the table in backend memory (exec_weights.c) */
    sp_weight sh_gate, sh_up, sh_down; /* shared experts (DeepSeek); format NONE if absent */
    const sp_dsv4_layer *v4;           /* DeepSeek-V4, else NULL */
} sp_layer;

/* What the forward pass reads: the embedding, the head and the layers. */
typedef struct sp_weights {
    sp_weight tok_embd, lm_head;
    const float *final_norm;
    sp_layer *layers; /* [n_layers + n_mtp] */
    sp_weight hc_head_fn; /* DeepSeek-V4: the streams' collapse before the head (the model's */
    const float *hc_head_base, *hc_head_scale; /* hc_head, or the MTP module's own) */
} sp_weights;

/* A DeepSeek multi-token prediction module's own tensors (model_load_mtp.c; the math in
 * forward_mtp.c). Its block is an ordinary layer, layers[n_layers]. */
typedef struct sp_mtp {
    const float *enorm, *hnorm; /* [H] on the token embedding, on the main model's hidden state */
    sp_weight eh_proj;          /* V3: [H, 2H] over [enorm(embed); hnorm(h)] */
    sp_weight e_proj, h_proj;   /* V4: [H, H] each, summed (h_proj per stream) */
    sp_weight hc_head_fn;       /* V4: the module's own hc_head [N, N H], base [N], scale [1] */
    const float *hc_head_base, *hc_head_scale;
    sp_weight head;             /* V3: shared_head.head [V, H]; V4: the main head */
    const float *head_norm;     /* V3: shared_head.norm, V4: mtp.0.norm [H] */
} sp_mtp;

struct sp_model {
    sp_hf_config *cfg;
    const sp_arch *arch;
    sp_checkpoint *ckpt;
    char *dir;

    int64_t n_vocab, n_embd, n_layers;
    int64_t n_heads, n_kv_heads, head_dim; /* GQA: q/k/v head dims; MLA: see below */
    int64_t qk_dim, v_dim;                 /* per-head dims seen by attention */
    int64_t q_dim, kv_dim_k, kv_dim_v;     /* q row width, cached k and v widths per token */
    float attn_scale;
    sp_rope rope;

    sp_weight tok_embd; /* [V, H] */
    sp_weight lm_head;  /* [V, H] (may alias tok_embd) */
    const float *final_norm;
    sp_layer *layers;   /* [n_layers + n_mtp] */

    /* multi-token prediction (DeepSeek-V3): n_mtp is 1 when the checkpoint carries the first
     * MTP module's tensors (model.layers.{n_layers}.eh_proj ...), else 0 */
    int64_t n_mtp;
    sp_mtp mtp;

    /* owned fp32 vectors, freed at close */
    float **owned;
    size_t *owned_n; /* their lengths */
    size_t n_owned, cap_owned;

    sp_quant quant; /* quantization scheme, packed-weight accounting, input scales */

    /* multi-head latent attention (DeepSeek) */
    int64_t mla_q_lora, mla_kv_lora, mla_nope, mla_rope, mla_v;

    /* DeepSeek-V4 (model_load_dsv4.c) */
    sp_rope rope_c;         /* the "compress" RoPE (CSA/HCA layers, compressors, indexer) */
    sp_dsv4_layer *v4;      /* [n_layers] */
    int32_t *v4_tid2eid;    /* owned hash tables, [hash layers, V, k] */
    sp_weight hc_head_fn;   /* [N, N H] */
    const float *hc_head_base, *hc_head_scale;
    int64_t v4_cw, v4_side; /* widest compressor row (2 hd); cache side-row width (see forward_dsv4.c) */
    /* Replay of transformers' prefill for parity tests only: the indexer breaks ties as
     * torch.topk over this many entries (0, the default: each query's own entries, which
     * keeps results batch-invariant; see kernels/cpu/dsv4.h sp_index_topk). */
    int64_t v4_index_queue;
    uint64_t weight_bytes; /* resident weight bytes */
    void (*load_progress)(void *ctx, uint64_t done, uint64_t total); /* sp_model_params' */
    void *load_progress_ctx;
    bool map_weights; /* sp_model_params': host backends compute on the mapping as it is */

    /* execution: the backend, the weights as it sees them, the pass's working memory */
    sp_backend *be;
    sp_precision precision;     /* as computed (the backend's answer to the asked one) */
    sp_weights exec;            /* host views on a host-memory backend (or aligned host
                                   copies: exec_weights.c), else device copies */
    sp_weights exec_mtp;        /* what an MTP pass reads: exec with the MTP module's head and
                                   norm as lm_head and final_norm (host-memory backends) */
    struct sp_exec_store *exec_store; /* the copies behind `exec`, NULL for views */
    uint64_t host_copy_bytes;   /* host memory those copies take on a host-memory backend */
    struct sp_compute *compute; /* grown on demand (sp_model_reserve) */
    pthread_mutex_t lock;       /* one forward pass at a time: sessions may share a model */
};

/* Parses the config and binds every tensor (model_load.c); sp_model_open (engine/) adds
 * the backend, the memory check and the weights on the backend. */
sp_status sp_model_load(const char *dir, sp_model **out, sp_error *err);
void sp_model_unload(sp_model *m);

/* Floats per position of the hidden state an MTP module reads: the residual row before the
 * final norm, or DeepSeek-V4's hc_mult streams before hc_head. */
static inline int64_t sp_model_hidden_width(const sp_model *m)
{
    return m->arch->attn == SP_ATTN_DSV4 ? m->cfg->dsv4.hc_mult * m->n_embd : m->n_embd;
}

/* Whether token is one of the model's end-of-sequence ids. */
bool sp_model_is_eos(const sp_model *m, int32_t token);

/* The default context and pass size of a session (specula.h: sp_session_params). */
int64_t sp_model_default_ctx(const sp_model *m);
/* 256 tokens a pass on the CPU; 512 on a GPU, whose prefill products need that many
 * tokens to fill its SMs (results do not depend on the pass size). */
int64_t sp_model_default_batch(const sp_model *m);
#define SP_DEFAULT_BATCH 256
#define SP_DEFAULT_BATCH_GPU 512

/* Bytes a session of n_ctx positions with n_batch-token passes adds: its KV cache, and the
 * model's pass buffers for n_batch tokens (shared by sessions). From the same plans that
 * allocate them (kv_cache.c, compute.c). UINT64_MAX when the size overflows. */
uint64_t sp_model_session_bytes(const sp_model *m, int64_t n_ctx, int64_t n_batch);

#endif
