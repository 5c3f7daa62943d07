/* model.h: the loaded model (behind the public sp_model handle).
 *
 * Ownership: the model owns its config, its checkpoint mappings, the small fp32 vectors
 * it converts at load (norm weights, biases, sinks: a few KB per layer) and the thread
 * pool. Matrices are sp_weight views into the mapped checkpoint and are never copied.
 * After sp_model_open the model is read-only. */
#ifndef SP_MODEL_MODEL_H
#define SP_MODEL_MODEL_H

#include "format/checkpoint.h"
#include "format/hf_config.h"
#include "kernels/weight.h"
#include "model/arch.h"
#include "model/quant.h"
#include "model/rope.h"
#include "util/threadpool.h"

typedef struct sp_expert {
    sp_weight gate, up, down; /* gpt-oss: gate holds the interleaved gate_up matrix */
    const float *gate_up_bias; /* gpt-oss [2I] interleaved, else NULL */
    const float *down_bias;    /* gpt-oss [H], else NULL */
    bool in_major;             /* stored [in, out] and used as x @ W (gpt-oss unquantized) */
} sp_expert;

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
    sp_weight sh_gate, sh_up, sh_down; /* shared experts (DeepSeek); format NONE if absent */
} sp_layer;

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
    sp_layer *layers;

    /* owned fp32 vectors, freed at close */
    float **owned;
    size_t n_owned, cap_owned;

    sp_quant quant; /* quantization scheme, packed-weight accounting, input scales */

    /* multi-head latent attention (DeepSeek) */
    int64_t mla_q_lora, mla_kv_lora, mla_nope, mla_rope, mla_v;

    sp_pool *pool;
    uint64_t weight_bytes; /* resident weight bytes */
};

/* Estimated bytes a session needs for n_ctx tokens and n_batch-token passes. */
/* Whether token is one of the model's end-of-sequence ids. */
bool sp_model_is_eos(const sp_model *m, int32_t token);

uint64_t sp_model_session_bytes(const sp_model *m, int64_t n_ctx, int64_t n_batch);

#endif
