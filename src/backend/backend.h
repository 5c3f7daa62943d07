/* backend.h: the ops the forward pass is written against, and the memory they run on.
 *
 * The forward pass (src/engine/) knows no backend: it calls these ops on pointers into
 * backend memory (host memory for the CPU backend, device memory for CUDA) and never
 * dereferences them itself. A backend is a table of functions plus its state; adding one
 * (Metal, ROCm) means writing a new table, not touching the forward pass.
 *
 *   memory   alloc / free / upload / download, and `view` (read an op output on the host)
 *   ops      embed, matmul (every weight format), matmul_t, rmsnorm, rope, add, swiglu,
 *            gptoss_glu, copy2d, kv_store, scale, attention (KV cache incl. sinks, sliding
 *            window, MLA latent rows), moe_route, moe_ffn (the expert sum); fused forms a
 *            backend may run as one kernel (matmul_multi, matmul_swiglu, add_rmsnorm), each
 *            bit-identical to the unfused ops it stands for
 *   record   optional: record a pass's ops once and replay them (CUDA graphs). Everything
 *            that changes between passes of one shape (tokens, positions, RoPE tables) is
 *            read from backend memory by the ops, never baked into their arguments
 *   DeepSeek-V4  hc_weights, hc_collapse, hc_expand, rope_tail, compress, index_topk,
 *            dsv4_attention, swiglu_limit (optional: NULL where a backend lacks them, and a
 *            V4 model is refused there at open; its passes are never recorded)
 *   errors   ops return nothing: a backend records the first failure (a failed kernel
 *            launch, with the op's name) and `finish` returns it after waiting for the
 *            queued work. A forward pass calls finish before it reads results.
 *
 * Shapes are [rows, width] row-major fp32 unless stated; a weight is an sp_weight whose
 * data and scale pointers are in this backend's memory. Numerics contract (every backend):
 * an output row depends only on its own input row(s), the weights and the KV cache — never
 * on how many rows share the call — and is run-to-run deterministic. */
#ifndef SP_BACKEND_BACKEND_H
#define SP_BACKEND_BACKEND_H

#include "kernels/cpu/attention.h"
#include "kernels/cpu/dsv4.h"
#include "kernels/sample_row.h"
#include "kernels/weight.h"
#include "model/moe_route.h"
#include "specula.h"

#include <stdbool.h>
#include <stddef.h>

/* One expert as the backend sees it (pointers in backend memory). gpt-oss: `gate` holds
 * the interleaved gate_up matrix. */
typedef struct sp_expert {
    sp_weight gate, up, down;
    const float *gate_up_bias; /* gpt-oss [2I] interleaved, else NULL */
    const float *down_bias;    /* gpt-oss [H], else NULL */
    bool in_major;             /* stored [in, out], used as x @ W (gpt-oss unquantized) */
} sp_expert;

/* Experts at equal steps: every entry's pointers are entry 0's moved e steps (one tensor
 * holds all experts, as gpt-oss ships them), its shapes are entry 0's and none is
 * input-major. A kernel then finds an expert's matrices from its id alone, without reading
 * the table on the way to the weights (a dependent round trip a launch). Zero: unknown,
 * read the table. */
typedef struct sp_expert_steps {
    bool uniform;
    sp_expert first;             /* entry 0, pointers in backend memory */
    int64_t data[3], scales[3];  /* byte steps of gate, up, down */
    int64_t gate_up_bias, down_bias; /* float steps */
} sp_expert_steps;

/* The steps of a table of n entries (host copies of backend pointers), or zero. */
sp_expert_steps sp_expert_steps_of(const sp_expert *table, int64_t n);

typedef enum sp_glu_kind {
    SP_GLU_SWIGLU,
    SP_GLU_GPTOSS,
    SP_GLU_SWIGLU_LIMIT, /* silu(min(g, limit)) * clamp(u, -limit, limit) (DeepSeek-V4) */
} sp_glu_kind;

/* The expert block of one layer: out[t] = sum over the token's k experts, in ascending
 * expert id, of w[t, j] * expert_{ids[t, j]}(x[t]). */
typedef struct sp_moe_args {
    const sp_expert *experts; /* [n_experts], the table itself in backend memory */
    int64_t n_experts, top_k, n_embd, inter;
    sp_glu_kind glu;
    float alpha, limit;       /* gpt-oss GLU */
    const float *x;           /* [n_tok, n_embd] */
    int64_t n_tok;
    const int32_t *ids;       /* [n_tok, top_k] */
    const float *w;           /* [n_tok, top_k] */
    float *out;               /* [n_tok, n_embd] */
    void *scratch;            /* sp_moe_scratch_bytes() bytes of backend memory */
    /* What a backend may specialize on (zero = unknown: the general path): */
    sp_wformat row_format;    /* the format of every row-major expert matrix, SP_WF_NONE
                                 when they differ */
    bool row_major_only;      /* no expert is stored input-major */
    sp_expert_steps steps;    /* the table's layout (zero: read each entry) */
    /* Only where the backend's moe_adds_norm is true (else ignored): with then_x set, the
     * op goes on with add_rmsnorm(then_x, out, then_w, n_tok, n_embd, then_eps, then_xn)
     * and exactly its results, the residual step after the block. */
    float *then_x;
    const float *then_w;
    float then_eps;
    float *then_xn;
} sp_moe_args;

/* Scratch bytes moe_ffn needs for up to n_tok tokens (any backend). */
size_t sp_moe_scratch_bytes(int64_t n_tok, int64_t top_k, int64_t n_experts, int64_t n_embd,
                            int64_t inter);

typedef struct sp_backend sp_backend;

/* Up to this many products of one input in one matmul_multi call. */
#define SP_MULTI_MAX 4

/* What identifies a recorded pass: equal keys mean the same ops with the same arguments. */
typedef struct sp_rec_key {
    const void *bytes;
    size_t len;
} sp_rec_key;

/* rope_kv_store's arguments: n rows of q [n, n_q_heads * head_dim] and k
 * [n, n_kv_heads * head_dim] (RoPE on the first rot_dim dims of each head, NeoX halves,
 * cos_sin [n, rot_dim], in place), then row r of k and of v [n, v_width] to row pos[r] of
 * k_cache (stride n_kv_heads * head_dim) and v_cache (stride v_width). */
typedef struct sp_rope_kv_args {
    float *q, *k;
    const float *v;
    int64_t n, n_q_heads, n_kv_heads, head_dim, rot_dim, v_width;
    const float *cos_sin;
    const int32_t *pos;
    float *k_cache, *v_cache;
} sp_rope_kv_args;

#define SP_QUEUED_READS 4       /* download_queued's slots */
#define SP_QUEUED_READ_BYTES 64 /* and the bytes each holds */

typedef struct sp_backend_ops {
    const char *name; /* "cpu", "cuda" */
    void (*destroy)(sp_backend *be);

    sp_status (*alloc)(sp_backend *be, size_t bytes, void **out, sp_error *err);
    void (*free)(sp_backend *be, void *p);
    sp_status (*upload)(sp_backend *be, void *dst, const void *src, size_t bytes, sp_error *err);
    sp_status (*download)(sp_backend *be, void *dst, const void *src, size_t bytes, sp_error *err);
    /* (optional) upload without waiting: the copy is ordered before every op issued after
     * it and src may be reused as soon as this returns; a failure shows at finish. NULL:
     * callers use upload. For a pass's small inputs (its first op). */
    sp_status (*upload_queued)(sp_backend *be, void *dst, const void *src, size_t bytes,
                               sp_error *err);
    /* (optional, both or neither) a read back without waiting: download_queued copies
     * bytes (at most SP_QUEUED_READ_BYTES) from src into the backend's slot `slot` (0 ..
     * SP_QUEUED_READS - 1) behind the ops issued so far; download_wait waits for that copy
     * and gives its bytes to dst, or returns the first failure since the last finish. A
     * slot holds one read until it is waited for. */
    sp_status (*download_queued)(sp_backend *be, int slot, const void *src, size_t bytes,
                                 sp_error *err);
    sp_status (*download_wait)(sp_backend *be, int slot, void *dst, size_t bytes, sp_error *err);
    /* The host-readable contents of n bytes at p: p itself where backend memory is host
     * memory, else a copy in `staging` (n bytes). NULL (and the error recorded) on failure. */
    const void *(*view)(sp_backend *be, const void *p, size_t n, void *staging);
    /* Waits for queued ops; the first failure since the last finish, naming its op. */
    sp_status (*finish)(sp_backend *be, sp_error *err);
    /* Bytes free for this backend's allocations (the memory check). */
    uint64_t (*free_bytes)(sp_backend *be);
    /* The matmul arithmetic (sp_model_params.precision), set once before any op. Returns
     * the precision the backend computes in: FAST where it has fast kernels (CPU: BF16
     * dot products; CUDA: BF16 tensor cores for BF16 weights), else EXACT. */
    sp_precision (*set_precision)(sp_backend *be, sp_precision want);

    void (*embed)(sp_backend *be, const sp_weight *table, const int32_t *ids, int64_t n,
                  float *out);
    void (*matmul)(sp_backend *be, const sp_weight *w, const float *x, int64_t n, float *y,
                   const float *bias);
    void (*matmul_t)(sp_backend *be, const sp_weight *w, int64_t row0, int64_t n_in,
                     const float *x, int64_t x_stride, int64_t n, float *y, int64_t y_stride,
                     const float *bias);
    void (*rmsnorm)(sp_backend *be, const float *x, int64_t x_stride, const float *w,
                    int64_t rows, int64_t dim, float eps, float *out, int64_t out_stride);
    /* RoPE on the first rot_dim dims of n_heads heads per token, in place; cos_sin:
     * [n, rot_dim] (rot_dim/2 cos then rot_dim/2 sin per token, see rope.h). */
    void (*rope)(sp_backend *be, float *x, int64_t n, int64_t n_heads, int64_t tok_stride,
                 int64_t head_stride, int64_t rot_dim, const float *cos_sin, bool interleaved);
    void (*add)(sp_backend *be, float *y, const float *x, int64_t n);
    void (*swiglu)(sp_backend *be, const float *gate, const float *up, int64_t n, float *out);
    void (*gptoss_glu)(sp_backend *be, const float *gu, int64_t n, int64_t inter, float alpha,
                       float limit, float *out);
    void (*copy2d)(sp_backend *be, float *dst, int64_t dst_stride, const float *src,
                   int64_t src_stride, int64_t rows, int64_t width);
    /* Row r of src goes to row pos[r] of dst (the KV cache write); pos: int32 [rows] in
     * backend memory (the pass's positions). */
    void (*kv_store)(sp_backend *be, float *dst, int64_t dst_stride, const int32_t *pos,
                     const float *src, int64_t src_stride, int64_t rows, int64_t width);
    void (*scale)(sp_backend *be, float *x, int64_t n, float factor);
    /* ys[i] = x ws[i]^T + biases[i] for i < n (n <= SP_MULTI_MAX, same cols): n matmuls. */
    void (*matmul_multi)(sp_backend *be, int n, const sp_weight *const *ws, const float *x,
                         int64_t n_tok, float *const *ys, const float *const *biases);
    /* out = swiglu(x wg^T, x wu^T); up: scratch [n_tok, wu rows] a backend may use. */
    void (*matmul_swiglu)(sp_backend *be, const sp_weight *wg, const sp_weight *wu,
                          const float *x, int64_t n_tok, float *out, float *up);
    /* x += res (rows x dim, contiguous), then out = rmsnorm(x) (out not aliasing x). */
    void (*add_rmsnorm)(sp_backend *be, float *x, const float *res, const float *w,
                        int64_t rows, int64_t dim, float eps, float *out);
    /* (optional) GB/s of a device-to-device copy (read + written), measured now; 0 when
     * it cannot be measured. */
    double (*copy_bandwidth)(sp_backend *be);
    /* (optional) rope(q), rope(k), kv_store(k), kv_store(v) of one sequence's rows as one
     * op, with exactly those ops' results (k keeps its rotated values); NULL: the forward
     * pass issues the four. */
    void (*rope_kv_store)(sp_backend *be, const sp_rope_kv_args *a);
    /* (optional) matmul_multi of ws = {wq, wk, wv} and x into a->q, a->k and v (biases
     * as there; a->v == v), then rope_kv_store(a), as one op with exactly those ops'
     * results; for a->rot_dim == a->head_dim (the forward pass calls it only then). NULL:
     * the forward pass issues the two. */
    void (*matmul_rope_kv)(sp_backend *be, const sp_weight *const *ws, const float *const *biases,
                           const float *x, float *v, const sp_rope_kv_args *a);
    /* a->scratch is ignored: a backend keeps what it needs (see attn_scratch_bytes). */
    void (*attention)(sp_backend *be, const sp_attn_args *a);
    /* (optional) n independent attentions at once (the sequences of a pass); NULL: the
     * forward pass calls attention n times. Results as attention's, one by one. */
    void (*attention_many)(sp_backend *be, const sp_attn_args *a, int64_t n);
    void (*moe_route)(sp_backend *be, const sp_route_cfg *cfg, const float *logits, int64_t n,
                      int32_t *ids, float *w);
    void (*moe_ffn)(sp_backend *be, const sp_moe_args *a);
    /* (optional) moe_route(cfg, logits, a->n_tok, ids, w) then moe_ffn(a) as one op, with
     * exactly their results (a->ids and a->w are ids and w, written here); the backend may
     * route inside its expert kernels. NULL: the forward pass issues the two. */
    void (*moe_route_ffn)(sp_backend *be, const sp_route_cfg *cfg, const float *logits, int32_t *ids,
                          float *w, const sp_moe_args *a);
    /* (optional) ids[r] = sp_argmax(logits row r, n_vocab) for r < rows, rows n_vocab apart
     * (ids: int32 in backend memory): greedy picks without reading the logits back. NULL:
     * the engine reads the rows back and picks on the host. */
    void (*logits_argmax)(sp_backend *be, const float *logits, int64_t rows, int64_t n_vocab,
                          int32_t *ids);
    /* (optional) ids[r] = the draw of logits row r with reqs[r] by kernels/sample_row.h's
     * arithmetic (the host sampler's token; greedy where reqs[r].inv_t is 0), or -1 where
     * the backend leaves the row to the host (the caller reads it back and draws there).
     * reqs and ids in backend memory. NULL: the engine reads the rows back and draws on the
     * host. */
    void (*logits_sample)(sp_backend *be, const float *logits, int64_t rows, int64_t n_vocab,
                          const sp_sample_req *reqs, int32_t *ids);
    /* (optional) speculative verification of m <= SP_SPEC_DEV_K drafts by
     * runtime/spec_verify.c's rule: target holds the target's m + 1 logits rows, draft the
     * draft's m rows (NULL: q one-hot at each draft), n_vocab floats apart; reqs (the
     * target's rows', then the draft's) and args in backend memory. out[0] = drafts
     * accepted, out[1] = the next token (the replacement or the bonus), the host's tokens;
     * out[0] = -1 where the host must verify. */
    void (*spec_verify)(sp_backend *be, const float *target, const float *draft, int64_t m,
                        int64_t n_vocab, const sp_sample_req *reqs, const sp_spec_args *args,
                        int32_t *out);

    /* Recording (NULL where a backend has none). replay: true when work recorded under
     * key was enqueued (issue nothing). record_begin: true when the ops issued until
     * record_end are recorded rather than run (the backend decides, e.g. on a key's second
     * sighting). record_end: ends the recording and enqueues it once; false when the
     * recording failed and nothing ran (issue the ops again, unrecorded). */
    bool (*replay)(sp_backend *be, sp_rec_key key);
    bool (*record_begin)(sp_backend *be, sp_rec_key key);
    bool (*record_end)(sp_backend *be);
    /* DeepSeek-V4 (math: kernels/cpu/dsv4.h). mix [n, mix_stride]; head mode (pre only)
     * when post and comb are NULL. */
    void (*hc_weights)(sp_backend *be, const float *mix, int64_t mix_stride, const float *base,
                       const float *scale, int64_t n, int64_t N, int64_t iters, float eps,
                       float *pre, float *post, float *comb);
    /* streams [n, N*H], pre [n, N] -> out [n, H] */
    void (*hc_collapse)(sp_backend *be, const float *streams, const float *pre, int64_t n,
                        int64_t N, int64_t H, float *out);
    /* out [n, N*H] (not aliasing streams) = post * y + comb^T streams, per row */
    void (*hc_expand)(sp_backend *be, const float *streams, const float *y, const float *post,
                      const float *comb, int64_t n, int64_t N, int64_t H, float *out);
    /* x points at head 0's trailing rot dims of token 0; cs [n, rot] */
    void (*rope_tail)(sp_backend *be, float *x, int64_t n, int64_t n_heads, int64_t tok_stride,
                      int64_t head_stride, int64_t rot, const float *cs, bool inverse);
    /* entries w0..w1-1 into out rows (stride out_stride); cs [w1 - w0, rot] */
    void (*compress)(sp_backend *be, const sp_compress_args *a, int64_t w0, int64_t w1,
                     const float *cs, float *out, int64_t out_stride);
    void (*index_topk)(sp_backend *be, const sp_index_batch *b);
    /* a->scratch is ignored (the backend keeps its own) */
    void (*dsv4_attention)(sp_backend *be, const sp_dsv4_attn_args *a);
    void (*swiglu_limit)(sp_backend *be, const float *gate, const float *up, int64_t n,
                         float limit, float *out);
} sp_backend_ops;

struct sp_backend {
    const sp_backend_ops *ops;
    char device_name[320]; /* "cpu (2 threads)", "cuda:0 NVIDIA H100 80GB HBM3" */
    uint64_t total_bytes;  /* the device's memory (0 when it is the host's) */
    bool host_memory;      /* backend memory is host memory (weights need no copy) */
    bool moe_adds_norm;    /* moe_ffn and moe_route_ffn honour sp_moe_args.then_x */
    int device_index;      /* which device of its kind: backends of one kind and index can
                            * read each other's memory */
};

/* Opens the backend a device string names: "cpu", "cuda", "cuda:N", or "auto"/NULL (the
 * first usable GPU, else the CPU). The CPU backend gets n_threads workers (0 = all CPUs).
 * *chosen_auto tells whether "auto" picked it (the caller says which on stderr). */
sp_status sp_backend_open(const char *device, int n_threads, sp_backend **out, sp_error *err);
void sp_backend_close(sp_backend *be);

/* Whether this build has the CUDA backend, and how many devices it sees. */
int sp_backend_cuda_devices(void);

#endif
