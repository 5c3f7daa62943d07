/* compute.h: the working memory of a forward pass over up to `cap` tokens — one per model,
 * shared by all its sessions (a pass holds the model's lock), in backend memory, laid out
 * from one size plan. The same plan sizes the memory check (model_mem.c), so what is
 * checked is what is allocated.
 *
 * Activations ([cap, width] fp32 unless stated):
 *   x, xn            residual stream, normed input             width n_embd
 *   q, k, v, att, o  attention                                 q_dim, kv_dim_k, kv_dim_v,
 *                                                              heads * v_dim, n_embd
 *   gate, up, ffn    dense MLP / shared experts, block output  widest MLP, n_embd
 *   mla_*            MLA: q_a or kv_a rows, raw queries, per-head values and one head's
 *                    latent output and value
 *   router, moe_w    router logits [cap, E], chosen weights [cap, k]
 *   moe_ids          int32 [cap, k]
 *   tokens, pos      int32 [cap]: each row's token id and position   } the pass's inputs,
 *   rope_cs          [cap, rope dim] cos/sin of each row's position  } adjacent: one upload
 *   logits           [SP_LOGIT_ROWS, n_vocab]: the LM head runs in slices of rows
 *   logit_ids        [SP_LOGIT_ROWS] int32: their argmax or draw, where only that is read back
 *   sample_reqs      [SP_LOGIT_ROWS] sp_sample_req: each row's draw, where drawn there
 *   spec_reqs        [2 SP_LOGIT_ROWS] sp_sample_req, spec_args [SP_LOGIT_ROWS / 2]: the
 *                    speculative verifications' rows' draws, drafts and uniforms
 *   moe_scratch      the backend's expert-block scratch (sp_moe_scratch_bytes)
 *   mtp_h, mtp_in    multi-token prediction (forward_mtp.c): the main model's hidden states
 *                    [cap, sp_model_hidden_width] uploaded for an MTP pass, and (V3)
 *                    [enorm(embed); hnorm(h)] [cap, 2H]
 *   v4               DeepSeek-V4 (forward_dsv4.c): x holds the hc_mult residual streams
 *                    [cap, N*H]; x2 the next streams, hc_* the mixing rows, col the collapsed
 *                    row, qres the normed q_lora row, a/b compressor and indexer rows, sel
 *                    the indexer's choices, g/g2/oa the grouped output projection, cs2 the
 *                    "compress" RoPE rows, ecs the RoPE rows of compressed entries
 * Host staging (malloc): the inputs before upload (the same layout), and op outputs read
 * back for observers on backends whose memory is not the host's. `serial` names this
 * allocation for recorded passes (never reused by a later one). */
#ifndef SP_ENGINE_COMPUTE_H
#define SP_ENGINE_COMPUTE_H

#include "model/model.h"

/* Logits rows one pass of the LM head holds: a server step's verify rows (sequences x
 * (drafts + 1)) come back as picks or verification outcomes only when they fit. */
#define SP_LOGIT_ROWS 128

typedef struct sp_compute {
    sp_backend *be;
    int64_t cap;
    void *mem; /* one backend allocation holding everything below */
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *up, *ffn;
    float *mla_a, *mla_b, *mla_c, *mla_t, *mla_u;
    float *router, *moe_w;
    int32_t *moe_ids, *tokens, *pos;
    float *rope_cs, *logits;
    int32_t *logit_ids; /* [SP_LOGIT_ROWS] greedy picks of the logits rows (backend memory) */
    int32_t h_logit_ids[SP_LOGIT_ROWS]; /* their host copy */
    sp_sample_req *sample_reqs;          /* [SP_LOGIT_ROWS] the rows' draws (backend memory) */
    sp_sample_req h_sample_reqs[SP_LOGIT_ROWS]; /* their host copy */
    sp_sample_req *spec_reqs;            /* [2 SP_LOGIT_ROWS] verifications' rows' draws */
    sp_sample_req h_spec_reqs[2 * SP_LOGIT_ROWS];
    sp_spec_args *spec_args;             /* [SP_LOGIT_ROWS / 2] their drafts and uniforms */
    sp_spec_args h_spec_args[SP_LOGIT_ROWS / 2];
    void *moe_scratch;
    float *mtp_h, *mtp_in; /* NULL without an MTP module */
    struct {
        float *x2, *hc_t, *hc_mix, *hc_pre, *hc_post, *hc_comb, *col, *qres, *a, *b, *iw;
        float *g, *g2, *oa, *cs2, *ecs, *head;
        int32_t *sel;
        float *h_cs2, *h_ecs; /* host staging [cap, rot], [cap + 1, rot] */
        int32_t *h_ids;       /* host staging of hash-routed ids [cap, k] */
    } v4;

    struct sp_seg *segs; /* [segs_cap] a pass's segments (forward.c), grown on demand */
    sp_attn_args *attn;  /* [segs_cap] their attention arguments (attention_many) */
    int64_t segs_cap;
    uint64_t serial;
    unsigned char *h_inputs; /* host mirror of tokens .. rope_cs */
    int32_t *h_tokens, *h_pos;
    float *h_rope_cs;
    unsigned char *rec_key;  /* a recorded pass's key bytes (forward.c), rec_key_cap */
    size_t rec_key_cap;
    float *h_view;      /* observer staging, h_view_floats */
    size_t h_view_floats;
} sp_compute;

/* Bytes of backend memory a pass over cap tokens needs (0 with *overflow on overflow). */
uint64_t sp_compute_bytes(const sp_model *m, int64_t cap, bool *overflow);
sp_status sp_compute_new(sp_model *m, int64_t cap, sp_compute **out, sp_error *err);
void sp_compute_free(sp_compute *c);
/* Bytes of the inputs' upload for a pass of n rows (tokens, pos, n rows of cos/sin). */
size_t sp_compute_inputs_bytes(const sp_compute *c, int64_t n, int64_t rope_dim);
/* A number never returned before in this process (names allocations for recorded passes). */
uint64_t sp_next_serial(void);
/* Host staging of at least n floats for reading op outputs back (observers). */
float *sp_compute_view_staging(sp_compute *c, size_t n);

#endif
