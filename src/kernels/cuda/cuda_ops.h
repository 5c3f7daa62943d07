/* cuda_ops.h: the CUDA kernels as a C-callable library (no CUDA types here).
 *
 * Every data pointer is a DEVICE pointer (plain cudaMalloc memory, see spc_malloc);
 * weights are the ordinary sp_weight views (kernels/weight.h) whose data/scales point into
 * device memory. Activations are fp32, row-major. A stream is a cudaStream_t passed as
 * void* (NULL = the legacy default stream).
 *
 * Every function enqueues its work on the stream, checks the launch (cudaGetLastError)
 * and returns 0 or a cudaError_t value (spc_error_string names it). Argument errors (a
 * shape a kernel does not support) return cudaErrorInvalidValue (1). Batch limits (grid
 * dimensions): spc_attention and spc_rope n_tok <= 65535, spc_matmul / spc_matmul_t
 * n_tok <= 524280; callers chunk larger batches (results do not depend on chunking).
 *
 * Numerics contract (as the CPU's): every output element is one fixed-order reduction
 * that depends only on that element's own inputs and the matrix shape, never on n_tok,
 * on which other rows/tokens share the launch, or on timing. No split-K, no algorithm
 * choice by batch size, no atomics. A token's outputs are bit-identical alone, in a
 * verify batch or in a prefill chunk, and run to run. Results are close to (not
 * bit-equal with) the CPU kernels: a different, fixed order. Weight decoding
 * (spc_weight_rows_f32 and inside the matmuls) gives exactly the CPU decoder's values
 * (sp_weight_at), except that a NaN decodes to the GPU's canonical NaN bits.
 *
 * Matmul reduction order (per output element, for the record): the row's columns are
 * cut into chunks of CH elements (16 bytes of weight: F32 4, BF16/F16 8, FP8 16,
 * MXFP4/NVFP4 32); chunk j belongs to slot j % 128 (the 128 threads of a block, slot s
 * = lane s % 32 of warp s / 32); each slot accumulates its chunks in ascending order with
 * fmaf, element by element; each warp adds its 32 slot sums by an xor-butterfly (16, 8,
 * 4, 2, 1); the four warp sums are added as (w0 + w1) + (w2 + w3); then + bias. The same
 * order in spc_matmul, spc_matmul_multi, spc_matmul_swiglu and the row-major experts of
 * spc_moe_ffn, whatever the schedule (rows per block, token tile 1/2/4/8 picked from
 * n_tok, loads in flight): the schedule only decides which registers hold what, never
 * the arithmetic.
 * Each weight element is decoded to the CPU decoder's exact fp32 value before its fmaf
 * (FP4 and FP8 by exponent arithmetic that gives the same bits as the table). */
#ifndef SP_KERNELS_CUDA_CUDA_OPS_H
#define SP_KERNELS_CUDA_CUDA_OPS_H

#include "kernels/cpu/attention.h" /* sp_attn_args */
#include "kernels/cpu/dsv4.h"      /* sp_compress_args, sp_index_batch, sp_dsv4_attn_args */
#include "kernels/sample_row.h"    /* sp_sample_req */
#include "kernels/weight.h"        /* sp_weight */
#include "model/moe_route.h"       /* sp_route_cfg, sp_moe_kind */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors and devices ------------------------------------------------------------ */

const char *spc_error_string(int code);

/* cudaErrorNotSupported: a kernel declines a shape its caller can run another way. */
#define SPC_NOT_SUPPORTED 801

/* Number of usable CUDA devices; 0 when there is none, no driver, or any error. */
int spc_device_count(void);

typedef struct spc_device_info {
    char name[256];
    size_t total_mem, free_mem; /* cudaMemGetInfo after selecting the device */
    int cc_major, cc_minor;     /* compute capability */
    int sm_count;
} spc_device_info;

/* Selects device `index` for the calling thread, creates a non-blocking stream into
 * *stream (may be NULL: no stream) and fills *info (may be NULL). */
int spc_device_open(int index, spc_device_info *info, void **stream);
int spc_stream_destroy(void *stream);
int spc_mem_info(size_t *free_bytes, size_t *total_bytes);

int spc_malloc(void **p, size_t bytes);
int spc_free(void *p); /* NULL ok */
/* Page-locked host memory (cudaHostAlloc) and events, for staged uploads. */
int spc_host_alloc(void **p, size_t bytes);
void spc_host_free(void *p); /* NULL ok */
int spc_event_new(void **ev);
int spc_event_record(void *ev, void *stream);
/* An event that keeps a timestamp, and the GPU time between two recorded ones. */
int spc_timing_event_new(void **ev);
int spc_event_elapsed_ms(void *from, void *to, float *ms);
int spc_event_sync(void *ev);
void spc_event_free(void *ev); /* NULL ok */
int spc_memset(void *stream, void *p, int value, size_t bytes);
int spc_memcpy_h2d(void *stream, void *dst, const void *src, size_t bytes); /* async */
int spc_memcpy_d2h(void *stream, void *dst, const void *src, size_t bytes); /* async */
int spc_memcpy_d2d(void *stream, void *dst, const void *src, size_t bytes); /* async */
int spc_memcpy_h2d_sync(void *stream, void *dst, const void *src, size_t bytes);
int spc_memcpy_d2h_sync(void *stream, void *dst, const void *src, size_t bytes);
int spc_stream_sync(void *stream);

/* ---- matrix products --------------------------------------------------------------- */

/* y[t, r] = bias[r] + sum_c x[t, c] * W[r, c]; x [n_tok, cols], y [n_tok, rows]
 * contiguous; bias may be NULL. Every format of weight.h. */
int spc_matmul(void *stream, const sp_weight *w, const float *x, int64_t n_tok, float *y,
               const float *bias);

/* Up to SPC_MULTI_MAX products of one x in one launch (Q, K, V; gate and up): for each
 * i < n, ys[i] = x W_i^T + biases[i] (biases may be NULL, or an entry NULL), every W_i
 * with the same cols. Bit-identical to n spc_matmul calls (same order per element); W_i
 * of different formats fall back to separate launches. */
#define SPC_MULTI_MAX 4
int spc_matmul_multi(void *stream, int n, const sp_weight *const *ws, const float *x,
                     int64_t n_tok, float *const *ys, const float *const *biases);

/* y[t, r] = silu(x Wg[r]) * (x Wu[r]) (the dense SwiGLU MLP's gate, up and activation in
 * one launch); bit-identical to spc_matmul(wg), spc_matmul(wu), spc_swiglu. wg and wu of
 * one format and shape; formats BF16, MXFP4, NVFP4, FP8 block (F32/F16 return
 * cudaErrorInvalidValue: run the unfused ops). */
int spc_matmul_swiglu(void *stream, const sp_weight *wg, const sp_weight *wu, const float *x,
                      int64_t n_tok, float *y);

/* ---- fast precision: BF16 weights on tensor cores (cuda_tc.cu) ----------------------
 * The same products for BF16 weights with x rounded to BF16 (round to nearest even) and
 * multiplied on tensor cores (mma.sync m16n8k16, fp32 accumulation): the GPU's
 * SP_PRECISION_FAST, the counterpart of the CPU's BF16 dot products. Relative to the
 * exact kernels above, only the rounding of x and the order below change; the contract
 * (nothing depends on n_tok or on the other tokens of a launch) is the same.
 * Order per output element (t, r): the columns are cut into slices of 128; a slice's
 * products are one chain of mma instructions over its 32-column steps in ascending order,
 * starting from zero (a step: the two mma of cuda_tc.cuh's fragment mapping; columns past
 * cols are zeros); the slice sums are added to 0.0f in ascending slice order; then
 * + bias. Every schedule (the few-token rows kernel, the many-token GEMM, its tile size)
 * issues exactly this sequence for every element, and the tensor core's result for an
 * element depends only on its own row, token and accumulator.
 * A weight qualifies when spc_tc_weight_ok: BF16, cols a multiple of 8, data and row
 * pitch 16-byte aligned. The device needs compute capability 8.0+ (spc_tc_supported).
 * Arguments as spc_matmul / spc_matmul_multi / spc_matmul_swiglu (all matrices must
 * qualify, or cudaErrorInvalidValue); the fused forms are bit-identical to separate
 * spc_matmul_tc calls (and spc_swiglu). scratch: device memory of scratch_bytes (16-byte
 * aligned) that products of more than 16 tokens use for x rounded to BF16 (n_tok * cols * 2
 * bytes, rows padded to whole 32-column steps; a smaller scratch runs the tokens in
 * pieces, none runs them 16 at a time, much slower; same bits). The caller owns it;
 * products on one stream may share one scratch, products that may run at the same time
 * may not. */
bool spc_tc_supported(void);
/* The many-token GEMM the current device runs: "wgmma" (Hopper, sm_90a code) or
 * "mma.sync" (after spc_tc_supported). */
const char *spc_tc_gemm_name(void);
bool spc_tc_weight_ok(const sp_weight *w);
int spc_matmul_tc(void *stream, const sp_weight *w, const float *x, int64_t n_tok, float *y,
                  const float *bias, void *scratch, size_t scratch_bytes);
int spc_matmul_tc_multi(void *stream, int n, const sp_weight *const *ws, const float *x,
                        int64_t n_tok, float *const *ys, const float *const *biases,
                        void *scratch, size_t scratch_bytes);
int spc_matmul_tc_swiglu(void *stream, const sp_weight *wg, const sp_weight *wu, const float *x,
                         int64_t n_tok, float *y, void *scratch, size_t scratch_bytes);

/* Transposed product (see sp_matmul_t): y[t * y_stride + c] = bias[c] + sum over i < n_in,
 * ascending, of x[t * x_stride + i] * W[row0 + i, c], for c < W.cols. */
int spc_matmul_t(void *stream, const sp_weight *w, int64_t row0, int64_t n_in, const float *x,
                 int64_t x_stride, int64_t n_tok, float *y, int64_t y_stride, const float *bias);

/* out[i, :] = row row_ids[i] of W decoded to fp32 (row_ids on the device, n rows,
 * out [n, cols]); bit-identical to sp_weight_row_f32 (NaN aside, see above). */
int spc_weight_rows_f32(void *stream, const sp_weight *w, const int32_t *row_ids, int64_t n,
                        float *out);

/* ---- per-row and element-wise ops -------------------------------------------------- */

/* out[r] = w * (x[r] / sqrt(mean(x[r]^2) + eps)); w may be NULL; x == out allowed.
 * One block per row, a fixed 256-thread reduction tree. */
int spc_rmsnorm(void *stream, const float *x, int64_t x_stride, const float *w, int64_t rows,
                int64_t dim, float eps, float *out, int64_t out_stride);
/* x[r] += res[r] for r < rows (dim elements), then out[r] = rmsnorm(x[r]) as spc_rmsnorm:
 * the residual add and the next norm in one launch, bit-identical to spc_add then
 * spc_rmsnorm. out must not alias x or res. */
int spc_add_rmsnorm(void *stream, float *x, int64_t x_stride, const float *res,
                    int64_t res_stride, const float *w, int64_t rows, int64_t dim, float eps,
                    float *out, int64_t out_stride);
int spc_add(void *stream, float *y, const float *x, int64_t n);              /* y += x */
int spc_scale(void *stream, float *x, int64_t n, float factor);            /* x *= f */
int spc_swiglu(void *stream, const float *g, const float *u, int64_t n, float *out); /* out may be g */
/* gpt-oss GLU (forward_moe.c): gu [n_tok, 2I] interleaved gate/up -> h [n_tok, I]. */
int spc_gptoss_glu(void *stream, const float *gu, int64_t n_tok, int64_t I, float alpha,
                   float limit, float *h);
/* dst[r * dst_stride + i] = src[r * src_stride + i] for i < width (floats). */
int spc_copy2d(void *stream, float *dst, int64_t dst_stride, const float *src,
               int64_t src_stride, int64_t rows, int64_t width);

/* dst[pos[r] * dst_stride + i] = src[r * src_stride + i] for r < rows, i < width: the KV
 * cache write with the positions read on the device (pos: int32 [rows]), so a recorded
 * launch stays right when the positions change. */
int spc_kv_store(void *stream, float *dst, int64_t dst_stride, const int32_t *pos,
                 const float *src, int64_t src_stride, int64_t rows, int64_t width);

/* RoPE in place on the first rot_dim elements of every head vector
 * x + t * tok_stride + h * head_stride (t < n_tok, h < n_heads). cos_sin [n_tok, rot_dim]:
 * rot_dim/2 cos then rot_dim/2 sin per token (sp_rope_cos_sin). interleaved = 0: NeoX
 * halves (sp_rope_neox); 1: GPT-J pairs de-interleaved into halves (sp_rope_interleaved).
 * Bit-identical to the CPU ops. rot_dim <= 2048. */
int spc_rope(void *stream, float *x, int64_t n_tok, int64_t n_heads, int64_t tok_stride,
             int64_t head_stride, int64_t rot_dim, const float *cos_sin, int interleaved);

/* spc_rope (NeoX halves) on q's n_q_heads and k's n_kv_heads heads (head_dim apart, rows
 * of n_q_heads * head_dim and n_kv_heads * head_dim floats), then spc_kv_store of k's and
 * v's rows (v_width floats) to rows pos[r] of k_cache / v_cache: one launch, the same
 * bits as the four. rot_dim <= head_dim <= 2048, n <= 65535. */
int spc_rope_kv_store(void *stream, float *q, float *k, const float *v, int64_t n,
                      int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim, int64_t rot_dim,
                      int64_t v_width, const float *cos_sin, const int32_t *pos, float *k_cache,
                      float *v_cache);

/* spc_matmul_multi of ws = {Wq, Wk, Wv} into q, k, v (biases as there), then
 * spc_rope_kv_store(q, k, v, n_tok, Wq rows / head_dim, Wk rows / head_dim, head_dim,
 * rot_dim = head_dim, Wv rows, ...): one launch, the same bits as the two (RoPE and the
 * cache writes in the product's epilogue; a block's rows are the pairs (r, r + head_dim /
 * 2) of a head, which the order of cuda_ops.h does not see). For one sequence's rows (one
 * cache). SPC_NOT_SUPPORTED where the kernels do not take the shape (formats that differ
 * or have no fused kernel, head counts not whole, half a head dim not a multiple of the
 * pairs a block takes, more than 65535 tokens): run the two ops then. */
int spc_matmul_qkv_rope(void *stream, const sp_weight *const *ws, const float *const *biases,
                        const float *x, int64_t n_tok, float *q, float *k, float *v,
                        int64_t head_dim, const float *cos_sin, const int32_t *pos,
                        float *k_cache, float *v_cache);

/* ---- attention --------------------------------------------------------------------- */

/* Causal attention over the cache as sp_attention (kernels/cpu/attention.h), device
 * pointers in a (q, k_cache, v_cache, sinks, out; scratch unused). Per (query, head):
 * keys in chunks of 128 starting at the query's first visible position, each chunk's max,
 * exp-sum and weighted value sum computed on its own, the chunks folded in ascending order
 * (cuda_attention.cu): the order depends only on the query's own position, window and the
 * head dims. qk_dim, v_dim <= 576; n_heads a multiple of n_kv_heads. */
int spc_attention(void *stream, const sp_attn_args *a);
/* The same, a query's chunks computed by up to `splits` blocks at once (0: as many as fill
 * the device; 1: one block) with their partials in `scratch`, device memory of
 * scratch_bytes whose first 16 KiB (a count per (query, head), up to 4096 of them) are
 * zero before the first launch and are left zero by each (one stream at a time). Without
 * room for spc_attention_split_bytes(a), or with more than 4096 (query, head) rows, one
 * block per (query, head). The same bits whatever the split; `which` as
 * spc_attention_kernel's. */
int spc_attention_split(void *stream, const sp_attn_args *a, int which, int splits, void *scratch,
                        size_t scratch_bytes);
/* Scratch a launch needs to split: the counts (16 KiB), then a partial for every chunk its
 * queries may have (n_ctx or the window, 128 keys a chunk), v_dim + 2 floats each. */
size_t spc_attention_split_bytes(const sp_attn_args *a);
/* Or'd into spc_attention_split's `which`: the cache rows before the first query's
 * position (q_pos[0], or pos0) are complete when the launch starts (the engine's passes:
 * each starts after the passes before it completed, behind the copy of its inputs, and
 * only its own positions are written during it), so the staged block kernel copies them before it waits on the kernel before it
 * (when launched as its programmatic dependent: after a short kernel). The same bits. */
#define SPC_ATTN_PAST_READY 16
/* The same with the kernel named: 1 a block per (query, head) (its keys and values staged
 * through shared memory where the dims allow), 3 the block kernel without staging, 2 a
 * warp per (query, head) (the same arithmetic operation for operation: equal bits; a warp
 * per four queries of a head where the keys stage and there is no window), 0 by the query
 * count (the warp kernels from 16 queries: prefill). */
int spc_attention_kernel(void *stream, const sp_attn_args *a, int which);
/* Once per device (spc_device_open calls it; outside any graph capture): lets the staged
 * block kernel use its shared memory. Without it the block kernel does not stage. */
void spc_attention_setup(void);

/* ---- mixture of experts ------------------------------------------------------------ */

/* Per token: logits [n_tok, E] -> ids [n_tok, k] (best first) and weights [n_tok, k],
 * as sp_moe_route (ties to the lower index); cfg->score_bias is a device pointer.
 * SP_MOE_HASH reads ids (filled by the caller) and writes the weights only.
 * n_experts <= 1024, top_k <= 64, n_group <= 64, n_experts / n_group >= 2. */
int spc_moe_route(void *stream, const sp_route_cfg *cfg, const float *logits, int64_t n_tok,
                  int32_t *ids, float *w);

/* An expert as the kernels see it, mirroring sp_expert (model/model.h): device-resident
 * tables of these let the kernel pick the expert by the device-side id. Weights' data /
 * scales and the biases are device pointers (name is ignored). */
typedef struct spc_expert {
    sp_weight gate, up, down;  /* gpt-oss: gate holds the interleaved gate_up matrix */
    const float *gate_up_bias; /* gpt-oss [2I] interleaved, else NULL */
    const float *down_bias;    /* gpt-oss [H], else NULL */
    bool in_major;             /* stored [in, out] and used as x @ W (spc_matmul_t) */
} spc_expert;

/* Experts at equal steps (sp_expert_steps): expert e's pointers are first's moved e steps. */
typedef struct spc_expert_steps {
    bool uniform;
    spc_expert first;
    int64_t data[3], scales[3];      /* byte steps of gate, up, down */
    int64_t gate_up_bias, down_bias; /* float steps */
} spc_expert_steps;

typedef enum spc_moe_act {
    SPC_ACT_SWIGLU = 0,       /* down(silu(gate x) * up x) */
    SPC_ACT_GPTOSS_GLU = 1,   /* gate_up (+bias) interleaved, clamp, alpha, down (+bias) */
    SPC_ACT_SWIGLU_LIMIT = 2, /* down(silu(min(gate x, limit)) * clamp(up x, +-limit)) (V4) */
} spc_moe_act;

typedef struct spc_moe_args {
    const spc_expert *experts; /* DEVICE table [n_experts] */
    int64_t n_experts;
    spc_moe_act act;
    int64_t H, I;             /* hidden size, expert intermediate size */
    float alpha, limit;       /* gpt-oss GLU */
    const float *x;           /* [n_tok, H] (normed hidden states) */
    int64_t n_tok, k;
    const int32_t *ids;       /* [n_tok, k] from spc_moe_route */
    const float *w;           /* [n_tok, k] */
    float *out;               /* [n_tok, H], overwritten */
    float *scratch_a, *scratch_b; /* each n_tok * k * max(2I, H) floats */
    int row_fmt;              /* every row-major expert matrix's sp_wformat, or SP_WF_NONE */
    bool row_major_only;      /* no input-major expert: the transposed pass is skipped */
    spc_expert_steps steps;   /* uniform: the kernels compute an expert's matrices from its id */
    /* Grouping by expert (both or neither; NULL: every pair alone): */
    float *scratch_c;         /* n_tok * k * H floats: inputs gathered in expert order */
    int32_t *group_ints;      /* spc_moe_group_ints(n_tok * k) ints */
    bool fast;                /* fast precision: MXFP4 experts on tensor cores (below) */
    /* (optional) then spc_add_rmsnorm(then_x, out, then_w, n_tok, H, then_eps, then_xn)
     * (rows H floats apart), bit for bit: with top_k <= 8 in the expert sum's launch (each
     * token's block sums its slots, adds the residual and normalizes). then_x NULL: none. */
    float *then_x;
    const float *then_w;
    float then_eps;
    float *then_xn;
} spc_moe_args;

/* Fast precision (spc_moe_args.fast) with every expert row-major MXFP4 (row_fmt), H and I
 * multiples of 32 and a device with tensor cores: the expert products take x rounded to
 * BF16 and the weights exactly (an MXFP4 value is a BF16), products summed in fp32 on
 * tensor cores (cuda_moe_tc.cu). Order per output (pair, r): 256-column slices (eight
 * MXFP4 blocks), each one chain of sixteen mma from zero in cuda_moe_tc.cu's operand
 * mapping; the slice sums added to 0.0f ascending; then + bias. Pairs alone or grouped
 * (up to 8 a group; 32 with gpt-oss's activation, cuda_moe_tc_gemm.cu) give the same
 * bits, as in exact precision; routing and the weighted
 * sum are unchanged, and gpt-oss's activation runs in the gate_up kernel's epilogue with
 * spc_gptoss_glu's operations. Otherwise fast is ignored (the exact kernels). */

/* Ints of spc_moe_args.group_ints for P = n_tok * k pairs. */
int64_t spc_moe_group_ints(int64_t pairs);

/* out[t] = sum over the token's k experts, in ascending expert id, of w * expert(x[t])
 * (p = y * w; out += p, unfused, as the CPU). With at least two (token, slot) pairs per
 * expert on average, row-major experts only, n_experts <= 1024 and the grouping scratch
 * given, the pairs that chose one expert share its weight reads, up to 4 per block (8 in
 * fast precision on tensor cores, 32 for gpt-oss's there; above); otherwise each pair runs
 * alone.
 * Either way every output has the matmul's per-row order (or the fast one): batch-invariant, and the
 * grouped launch is bit-identical to the pair-by-pair one. n_tok * k <= 65535 per call;
 * an id outside [0, n_experts) gives NaN outputs, not a fault. */
int spc_moe_ffn(void *stream, const spc_moe_args *a);

/* spc_moe_route(cfg, logits, a->n_tok, ids, w) then spc_moe_ffn(a with ids and w): the
 * same ids, weights and outputs bit for bit. Where the pass runs its pairs alone (not
 * grouped) on tensor cores (fast precision, MXFP4 experts) and the routing is gpt-oss's
 * (SP_MOE_TOPK_SOFTMAX, n_experts <= 32, top_k <= 8) with gpt-oss's activation, the
 * first expert kernel routes instead, each block its own pair (moe_route_warp.cuh): one
 * launch fewer. */
int spc_moe_route_ffn(void *stream, const sp_route_cfg *cfg, const float *logits, int32_t *ids,
                      float *w, const spc_moe_args *a);

/* One product of spc_moe_ffn for each of a's n_tok * k pairs alone (not grouped), in a's
 * precision: y[p * n_out + r] = bias + row r of the stage matrix (0 gate or gpt-oss's
 * gate_up, 1 up, 2 down) of expert ids[p] . x[(p / x_div) * x_stride ..], for r < n_out.
 * Row-major experts only (row_major_only); for tests of the per-stage arithmetic. */
int spc_moe_stage(void *stream, const spc_moe_args *a, int stage, const float *x, int64_t x_div,
                  int64_t x_stride, int64_t n_out, float *y);

/* ---- DeepSeek-V4 (cuda_dsv4.cu; the CPU references are kernels/cpu/dsv4.h) -------------
 * Same arguments as the backend ops of backend.h, device pointers throughout. Element-wise
 * results follow the CPU reference's order operation for operation (equal bits but for
 * expf's last bit); the entry RMSNorm and the attention reduce in a fixed tree; nothing
 * depends on how many rows share a launch. */
int spc_hc_weights(void *stream, const float *mix, int64_t mix_stride, const float *base,
                   const float *scale, int64_t n, int64_t N, int64_t iters, float eps, float *pre,
                   float *post, float *comb);
int spc_hc_collapse(void *stream, const float *streams, const float *pre, int64_t n, int64_t N,
                    int64_t H, float *out);
int spc_hc_expand(void *stream, const float *streams, const float *y, const float *post,
                  const float *comb, int64_t n, int64_t N, int64_t H, float *out);
int spc_rope_tail(void *stream, float *x, int64_t n, int64_t n_heads, int64_t tok_stride,
                  int64_t head_stride, int64_t rot, const float *cs, int inverse);
/* Entries w0..w1-1 (one block each); a's pointers on the device. */
int spc_compress(void *stream, const sp_compress_args *a, int64_t w0, int64_t w1, const float *cs,
                 float *out, int64_t out_stride);
/* The indexer: scores bit-identical to sp_index_topk's from the same inputs, and the same
 * choice (torch.topk's, the CPU's own code). queue: device scratch of at least
 * spc_index_queue_bytes(b) bytes (n_tok x max entries x 16). */
int spc_index_queue_bytes(const sp_index_batch *b, size_t *bytes);
int spc_index_topk(void *stream, const sp_index_batch *b, void *queue, size_t queue_bytes);
/* One block per (query, head); the key count (window + entries) up to 51200. */
int spc_dsv4_attention(void *stream, const sp_dsv4_attn_args *a);
int spc_swiglu_limit(void *stream, const float *gate, const float *up, int64_t n, float limit,
                     float *out);

/* ---- sampling helpers -------------------------------------------------------------- */

/* ids[r] = argmax of logits[r * stride .. + n_vocab) for r < rows, exactly as sp_argmax
 * (runtime/sampler.c) scans a row: the lowest index on ties, a NaN never wins, and a NaN
 * first element gives 0 (no later value compares greater than it). */
int spc_logits_argmax(void *stream, const float *logits, int64_t rows, int64_t n_vocab,
                      int64_t stride, int32_t *ids, void *scratch, size_t scratch_bytes);
/* Scratch (zeroed once before its first use; every launch leaves it so) with which
 * spc_logits_argmax splits each row across blocks: the same ids, a row read by many SMs.
 * One scratch serves launches of any number of rows in turn (on one stream). 0: that many
 * rows (more than 1024) are never split; less scratch or NULL: one block a row. */
size_t spc_argmax_split_bytes(int64_t rows, int64_t n_vocab);

/* Draws rows [rows] of logits (stride floats apart) with reqs[row] (device memory) by
 * kernels/sample_row.h's arithmetic into ids[row]: the host sampler's token, or -1 where
 * top-p's head is longer than SP_SAMPLE_HEAD candidates (then the host draws the row).
 * rows <= SPC_SAMPLE_MAX_ROWS a launch. scratch: spc_sample_scratch_bytes(rows, n_vocab) of device memory,
 * zeroed before its first use (every launch, of any row count, leaves its counters at 0). */
#define SPC_SAMPLE_MAX_ROWS 32 /* rows of one spc_sample_rows launch, at most */
int spc_sample_rows(void *stream, const float *logits, int64_t rows, int64_t n_vocab,
                    int64_t stride, const sp_sample_req *reqs, int32_t *ids, void *scratch,
                    size_t scratch_bytes);
size_t spc_sample_scratch_bytes(int64_t rows, int64_t n_vocab); /* 0: too large, or too many rows */

/* Speculative sampling's acceptance rule over m <= SP_SPEC_DEV_K drafts (cuda_spec_verify.cu;
 * runtime/spec_verify.c's arithmetic): target holds the target's m + 1 logits rows, draft
 * the draft's m rows (n_vocab floats apart each), or NULL: q one-hot at each draft; reqs (a
 * row each, the target's then the draft's) and args in device memory. out[0] = drafts
 * accepted, out[1] = the next token; out[0] = -1 where the host must verify. scratch:
 * spc_spec_scratch_bytes, zeroed before its first use; it may be the draws' scratch
 * (spc_sample_rows) when it is as large: both leave its counters at 0. */
int spc_spec_verify(void *stream, const float *target, const float *draft, int64_t m,
                    int64_t n_vocab, const sp_sample_req *reqs, const sp_spec_args *args,
                    int32_t *out, void *scratch, size_t scratch_bytes);
size_t spc_spec_scratch_bytes(int64_t n_vocab); /* 0: too large */

/* ---- recorded work (CUDA graphs) ---------------------------------------------------- */

/* Starts recording the stream's work (thread-local capture: nothing runs until launched). */
int spc_capture_begin(void *stream);
/* Ends the recording and instantiates it into *exec (NULL on failure). */
int spc_capture_end(void *stream, void **exec);
int spc_graph_launch(void *stream, void *exec);
void spc_graph_free(void *exec); /* NULL ok */

/* ---- testing error paths ----------------------------------------------------------- */

/* Launches a kernel that traps (a device-side fault), for testing how a failed kernel is
 * reported: the launch itself returns 0, the next synchronizing call returns the error
 * (cudaErrorLaunchFailure or similar), and the CUDA context of the process stays unusable
 * afterwards (a sticky error): run it in a child process. */
int spc_debug_trap(void *stream);

#ifdef __cplusplus
}
#endif

#endif
