/* forward_internal.h: one pass of the forward pass, shared by its blocks (forward.c: the
 * layer loop, GQA attention, dense MLP, recording; forward_head.c: final norm, LM head and
 * logits; forward_moe.c: expert blocks; forward_mla.c: latent attention). A pass is a run of segments — consecutive tokens of one sequence —
 * stacked as the rows of the pass's activations. */
#ifndef SP_ENGINE_FORWARD_INTERNAL_H
#define SP_ENGINE_FORWARD_INTERNAL_H

#include "engine/compute.h"
#include "engine/forward.h"

typedef struct sp_seg {
    const sp_seq_eval *seq;
    int64_t row0;  /* first row in the pass */
    int64_t n;     /* rows */
    int64_t pos0;  /* position of the first row */
    int64_t first; /* index of the first row within seq->tokens */
} sp_seg;

typedef struct sp_pass {
    sp_model *m;
    sp_backend *be;
    sp_compute *c;
    const sp_weights *w;
    sp_seg *segs;
    int64_t n_segs, n; /* segments, rows */
    bool observed;     /* some segment has an observer */
    bool mtp;          /* an MTP pass (forward_mtp.c): w is the model's exec_mtp */
    bool ids_only;     /* every logits row wanted is a last_id alone, picked on the device */
    bool sampled;      /* ids_only, and some row's pick is a draw (logits_sample) */
    bool spec;         /* ids_only, and some segment verifies drafts (spec_verify) */
    bool chained;      /* one token whose id is the pick of the pass before, read on the
                        * device (forward_chain.c) */
    sp_status st;      /* first failure reading an output back for an observer (or, in
                        * forward_dsv4.c, uploading mid-pass) */
    float *hx;         /* rows the final norm reads: c->x, or DeepSeek-V4's collapsed streams */
    sp_error *err;
} sp_pass;

/* Whether the pass is observed. Building with SP_NO_TRACE_HOOKS removes the checks
 * altogether (only to measure what they cost: see docs/BENCHMARKS.md). */
#ifdef SP_NO_TRACE_HOOKS
#define SP_TRACE_ON(P) ((void)(P), 0)
#else
#define SP_TRACE_ON(P) ((P)->observed)
#endif

/* Offers rows [r0, r0 + n) of segment g of an op output data [pass rows, width] (backend
 * memory) to the segment's observer, applying its perturbation first. */
void sp_emit_rows(sp_pass *P, const sp_seg *g, int layer, sp_op op, int64_t width, float *data,
                  int64_t r0, int64_t n);

/* Offers every segment's rows of data [P->n, width]. */
static inline void sp_emit(sp_pass *P, int layer, sp_op op, int64_t width, float *data)
{
    if (!SP_TRACE_ON(P))
        return;
    for (int64_t i = 0; i < P->n_segs; i++)
        if (P->segs[i].seq->obs)
            sp_emit_rows(P, &P->segs[i], layer, op, width, data + P->segs[i].row0 * width, 0,
                         P->segs[i].n);
}

/* forward.c. Queues the pass of one token of q (q->n == 1, wanting only its pick:
 * q->last_id, not observed, not MTP) without reading anything back: its inputs' upload and
 * its ops (recorded and replayed as any pass). chained: the token's id is not q->tokens[0]
 * but the pick the pass before left in the compute buffers (logit_ids[0]). The caller holds
 * the model's lock; the pick stays in logit_ids[0] until the next pass. */
sp_status sp_forward_queue_step(sp_model *m, const sp_seq_eval *q, bool chained, sp_error *err);

/* forward_head.c. Logits rows segment g wants (its first in *r0): all, its last, or none. */
int64_t sp_head_seg_rows(const sp_seg *g, int64_t *r0);
int64_t sp_head_rows_wanted(const sp_pass *P);
/* Rows wanted <= SP_LOGIT_ROWS: final norm + LM head into c->logits (ops only), then the
 * read back into each sequence's host rows. */
void sp_head_gathered(sp_pass *P);
sp_status sp_head_gathered_download(sp_pass *P);
/* Any number of rows: slices of SP_LOGIT_ROWS, each computed and read back. */
sp_status sp_head_sliced(sp_pass *P);
/* DeepSeek-V4 (forward_dsv4.c): cos/sin and the embedding into the streams; one layer;
 * the hc_head collapse (returns the rows for the final norm). */
sp_status sp_dsv4_begin(sp_pass *P);
/* An MTP pass (forward_mtp.c): streams_k = h_proj(hnorm(h_k)) + e_proj(enorm(embed)). */
sp_status sp_dsv4_mtp_begin(sp_pass *P);
/* The "compress" RoPE rows of the pass (sp_dsv4_begin's first step). */
sp_status sp_dsv4_upload_rope(sp_pass *P);
void sp_dsv4_layer_forward(sp_pass *P, int64_t l);
float *sp_dsv4_head(sp_pass *P);

/* forward_mtp.c. The pass's hidden_in rows into c->mtp_h (before the body); the MTP input
 * stage: x = eh_proj([enorm(embed); hnorm(mtp_h)]), xn = the block's attention norm of x;
 * every segment's hidden_out rows from P->hx (after the body). */
sp_status sp_mtp_upload(sp_pass *P);
void sp_mtp_begin(sp_pass *P);
sp_status sp_hidden_download(sp_pass *P);

/* From the host's expert table (hl: the model's own layer, not the backend's copy): the one
 * format of the row-major expert matrices (SP_WF_NONE when they differ) and whether no
 * expert is input-major: what sp_moe_args lets a backend specialize on. */
void sp_expert_formats(const sp_layer *hl, sp_wformat *row_format, bool *row_major_only);
/* xn [n, H] -> c->ffn [n, H]; with next_norm (the backend's moe_adds_norm, no shared
 * experts, no observer), then x += ffn and xn = rmsnorm(x) * next_norm in the same op:
 * returns whether it did. */
bool sp_forward_moe(sp_pass *P, int64_t l, const float *next_norm);
/* xn [n, H] -> c->o [n, H] (after o_proj); stores the pass's k/v rows in the caches. */
void sp_forward_mla(sp_pass *P, int64_t l);

#endif
