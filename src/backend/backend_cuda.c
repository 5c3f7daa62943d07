/* backend_cuda.c: the CUDA backend — the ops of backend.h on device memory, running the
 * kernels of src/kernels/cuda/ on one stream of one GPU.
 *
 * Ops only enqueue; the first failed launch is recorded with the op's name and returned
 * by finish (after a stream sync, which also catches faults inside kernels). Uploads and
 * downloads are synchronous, but for a pass's inputs (upload_queued) and the chained
 * greedy decode's picks (download_queued). Fault injection for tests (never set in normal
 * use):
 *   SPECULA_CUDA_FAIL_OP=NAME     the first launch of op NAME reports a launch failure
 *   SPECULA_CUDA_PLANT_BUG=NAME   op NAME's output is scaled by (1 + 1e-3) at its 3rd call:
 *                                 a wrong kernel, for `specula diff` to find
 * Either one turns recording off (it counts launches). Recording: a pass whose key was
 * seen before is captured as a CUDA graph and replayed from then on (rec_cache.h);
 * SPECULA_CUDA_GRAPHS=0 turns it off (to measure what it buys); SPECULA_CUDA_ATTN_SPLIT=0
 * keeps each (query, head) of the few-query attention in one block, =N splits its key
 * chunks over N blocks (at most 8; default: as many as keep the grid within the SMs),
 * always with the same bits; SPECULA_CUDA_QKV_ROPE=0 runs the Q/K/V product and RoPE + the
 * cache writes as two launches, SPECULA_CUDA_ATTN_EARLY=0 has the attention load earlier
 * passes' cache rows only after its wait (both to compare; the same bits);
 * SPECULA_CUDA_QUEUED_UPLOAD=0 has a pass wait for its inputs' upload before its kernels
 * are issued (to compare); SPECULA_CUDA_SAMPLE=0 reads sampled rows back and draws on the
 * host (the same tokens); SPECULA_CUDA_SPEC=0 reads speculative sampling's rows back and
 * verifies them on the host (the same tokens).
 * The file compiles to nothing in a CPU-only build. */
#ifdef SPECULA_HAVE_CUDA
#include "backend/backend_cuda.h"
#include "backend/cuda_replay_clock.h"
#include "backend/cuda_upload.h"
#include "backend/rec_cache.h"
#include "kernels/cuda/cuda_ops.h"
#include "util/error.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(sizeof(spc_expert) == sizeof(sp_expert) &&
                   offsetof(spc_expert, down_bias) == offsetof(sp_expert, down_bias) &&
                   offsetof(spc_expert, in_major) == offsetof(sp_expert, in_major),
               "spc_expert mirrors sp_expert");
_Static_assert(sizeof(spc_expert_steps) == sizeof(sp_expert_steps) &&
                   offsetof(spc_expert_steps, first) == offsetof(sp_expert_steps, first) &&
                   offsetof(spc_expert_steps, data) == offsetof(sp_expert_steps, data) &&
                   offsetof(spc_expert_steps, down_bias) == offsetof(sp_expert_steps, down_bias),
               "spc_expert_steps mirrors sp_expert_steps");

#define ERR_LAUNCH_FAILURE 719 /* cudaErrorLaunchFailure */
#define QUEUED_SLOTS 2                 /* pinned slots of upload_queued */
#define QUEUED_BYTES ((size_t)64 << 10) /* each: a decode or verify pass's inputs fit */

/* Pinned host slots with an event each (queued uploads, queued reads). */
#define PINNED_SLOTS_MAX 4
typedef struct pinned_slots {
    void *host; /* n x bytes of pinned memory, or NULL (not made yet) */
    void *ev[PINNED_SLOTS_MAX]; /* recorded behind each slot's last copy */
    int n;
    size_t bytes;
} pinned_slots;
_Static_assert(QUEUED_SLOTS <= PINNED_SLOTS_MAX && SP_QUEUED_READS <= PINNED_SLOTS_MAX,
               "pinned_slots holds the queued uploads' and reads' events");

typedef struct cuda_backend {
    sp_backend base;
    int index;
    void *stream;
    int status;       /* first failure since the last finish (a cudaError_t) */
    char failed[64];  /* its op */
    const char *fail_op, *plant_op;
    int plant_calls;
    bool graphs;           /* recording allowed */
    bool moe_group;        /* MoE pairs grouped by expert (SPECULA_CUDA_MOE_GROUP=0: off, to compare) */
    bool moe_fold;         /* routing in the expert kernels (SPECULA_CUDA_MOE_FOLD=0: off, to compare) */
    bool expert_steps;     /* experts found from their ids where they lie at equal steps
                              (SPECULA_CUDA_EXPERT_STEPS=0: read the table, to compare) */
    bool attn_early;       /* earlier passes' cache rows loaded before the attention's wait
                            * (SPECULA_CUDA_ATTN_EARLY=0: off) */
    bool qkv_rope;         /* RoPE and the cache writes in the Q/K/V product
                            * (SPECULA_CUDA_QKV_ROPE=0: off) */
    bool staged_upload;    /* large uploads through pinned buffers (SPECULA_CUDA_STAGED_UPLOAD=0: off) */
    bool fast;             /* SP_PRECISION_FAST: BF16 weights on tensor cores (cuda_tc.cu) */
    sp_cuda_stager *stager; /* made by the first large upload, freed by the next finish */
    bool queued_on;         /* upload_queued through pinned slots (SPECULA_CUDA_QUEUED_UPLOAD=0:
                             * off, every upload waits) */
    pinned_slots queued;    /* upload_queued's: QUEUED_SLOTS x QUEUED_BYTES, made on first use */
    bool queued_used[QUEUED_SLOTS];
    int queued_next;
    pinned_slots reads;     /* download_queued's: SP_QUEUED_READS x SP_QUEUED_READ_BYTES, made on
                             * first use */
    sp_rec_cache rec;
    sp_rec_slot *capturing; /* the slot being recorded, or NULL */
    void *index_queue;      /* DeepSeek-V4 indexer scratch (grown on demand) */
    size_t index_queue_bytes;
    void *attn_scratch;     /* split attention's partials (ATTN_SCRATCH bytes, or NULL) */
    int attn_split;         /* blocks a query's key chunks may take: 0 as many as fill the
                             * device (SPECULA_CUDA_ATTN_SPLIT=N: N, 1 or 0: one) */
    bool attn_tried;        /* the scratch was asked for */
    void *argmax_scratch;   /* greedy picks split across blocks (ARGMAX_SCRATCH bytes, or NULL:
                             * one block a row) */
    bool argmax_split;      /* the scratch may be asked for (SPECULA_CUDA_ARGMAX_SPLIT=0: no) */
    bool argmax_tried;
    void *sample_scratch;   /* logits_sample's and spec_verify's (sample_bytes, for sample_vocab) */
    size_t sample_bytes;
    int64_t sample_vocab;
    void *tc_scratch;       /* fast precision: x as bf16 for the tensor-core GEMM (TC_SCRATCH
                             * bytes, or NULL: the GEMM then runs 16 tokens at a time) */
    sp_replay_clock *clock; /* SPECULA_CUDA_REPLAY_TIMES=1: replays timed on the GPU */
    sp_backend_ops ops;     /* cuda_ops, less logits_argmax with SPECULA_CUDA_ARGMAX=0 (greedy
                             * picks on the host after reading the logits back, to compare),
                             * less the queued reads with SPECULA_CUDA_CHAIN=0 (greedy steps
                             * not fed on the device: each pick read back before the next) */
} cuda_backend;

static cuda_backend *cu(sp_backend *be) { return (cuda_backend *)be; }

static void check(cuda_backend *c, const char *op, int rc)
{
    if (c->fail_op && !strcmp(op, c->fail_op)) {
        c->fail_op = NULL;
        rc = ERR_LAUNCH_FAILURE;
    }
    if (rc && !c->status) {
        c->status = rc;
        snprintf(c->failed, sizeof c->failed, "%s", op);
    }
}

/* The planted bug: a slightly wrong output on the op's 3rd call. */
static void plant(cuda_backend *c, const char *op, float *out, int64_t n)
{
    if (c->plant_op && !strcmp(op, c->plant_op) && ++c->plant_calls == 3)
        check(c, op, spc_scale(c->stream, out, n, 1.001f));
}

static void slots_free(pinned_slots *p)
{
    for (int i = 0; i < p->n; i++) {
        spc_event_free(p->ev[i]);
        p->ev[i] = NULL;
    }
    spc_host_free(p->host);
    p->host = NULL;
}

/* n slots of `bytes` with their events, made once (0, or a CUDA error and none made). */
static int slots_make(pinned_slots *p, int n, size_t bytes)
{
    if (p->host)
        return 0;
    p->n = n;
    p->bytes = bytes;
    int rc = spc_host_alloc(&p->host, (size_t)n * bytes);
    for (int i = 0; !rc && i < n; i++)
        rc = spc_event_new(&p->ev[i]);
    if (rc)
        slots_free(p);
    return rc;
}

static void *slot_at(const pinned_slots *p, int i)
{
    return (unsigned char *)p->host + (size_t)i * p->bytes;
}

static void cuda_destroy(sp_backend *be)
{
    cuda_backend *c = cu(be);
    spc_stream_sync(c->stream);
    sp_replay_clock_free(c->clock);
    sp_cuda_stager_free(c->stager);
    slots_free(&c->queued);
    slots_free(&c->reads);
    sp_rec_clear(&c->rec);
    spc_free(c->index_queue);
    spc_free(c->attn_scratch);
    spc_free(c->argmax_scratch);
    spc_free(c->sample_scratch);
    spc_free(c->tc_scratch);
    spc_stream_destroy(c->stream);
    free(c);
}

static sp_status cuda_alloc(sp_backend *be, size_t bytes, void **out, sp_error *err)
{
    *out = NULL;
    if (!bytes)
        return SP_OK;
    int rc = spc_malloc(out, bytes);
    if (rc) {
        size_t fr = 0, tot = 0;
        spc_mem_info(&fr, &tot);
        return sp_err(err, SP_ERR_NOMEM,
                      "cuda:%d: cudaMalloc of %.1f MiB failed (%s; %.1f of %.1f MiB free)",
                      cu(be)->index, bytes / 1048576.0, spc_error_string(rc), fr / 1048576.0,
                      tot / 1048576.0);
    }
    return SP_OK;
}

static void cuda_free(sp_backend *be, void *p) { spc_free(p); }

static sp_status copy_status(sp_backend *be, int rc, const char *what, size_t bytes, sp_error *err)
{
    if (!rc)
        return SP_OK;
    return sp_err(err, SP_ERR_INTERNAL, "cuda:%d: %s of %zu bytes failed: %s", cu(be)->index, what,
                  bytes, spc_error_string(rc));
}

/* From this size an upload goes through the pinned staging buffers (cuda_upload.c). */
#define STAGED_UPLOAD_MIN ((size_t)32 << 20)

static sp_status cuda_upload(sp_backend *be, void *dst, const void *src, size_t bytes, sp_error *err)
{
    /* every pass starts with an upload: make this thread use our device (a session may be
     * evaluated from another thread than the one that opened the model) */
    spc_device_open(cu(be)->index, NULL, NULL);
    if (!bytes)
        return SP_OK;
    cuda_backend *c = cu(be);
    /* the weights arrive in chunks of 256 MB (exec_weights.c); a pass's inputs are small */
    if (c->staged_upload && bytes >= STAGED_UPLOAD_MIN && !c->stager &&
        !(c->stager = sp_cuda_stager_new()))
        c->staged_upload = false; /* no pinned memory here: do not ask again for every chunk */
    if (c->staged_upload && bytes >= STAGED_UPLOAD_MIN)
        return copy_status(be, sp_cuda_staged_upload(c->stager, c->stream, dst, src, bytes), "upload",
                           bytes, err);
    return copy_status(be, spc_memcpy_h2d_sync(c->stream, dst, src, bytes), "upload", bytes, err);
}

/* A pass's inputs are copied through one of QUEUED_SLOTS pinned slots of QUEUED_BYTES,
 * asynchronously: the pass's kernels (or its recorded graph) follow on the stream without
 * the host waiting for the copy (llama-1b decode: one round trip less a step). A slot is
 * reused only after the event recorded behind its last copy; larger inputs (a long
 * prefill) take the plain upload. */
static sp_status cuda_upload_queued(sp_backend *be, void *dst, const void *src, size_t bytes,
                                    sp_error *err)
{
    cuda_backend *c = cu(be);
    if (!c->queued_on || bytes > QUEUED_BYTES)
        return cuda_upload(be, dst, src, bytes, err);
    spc_device_open(c->index, NULL, NULL); /* as cuda_upload: this thread, our device */
    if (slots_make(&c->queued, QUEUED_SLOTS, QUEUED_BYTES)) {
        c->queued_on = false; /* no pinned memory or events here: the plain way from now on */
        return cuda_upload(be, dst, src, bytes, err);
    }
    if (!bytes)
        return SP_OK;
    const int i = c->queued_next;
    c->queued_next = (i + 1) % QUEUED_SLOTS;
    unsigned char *slot = slot_at(&c->queued, i);
    int rc = c->queued_used[i] ? spc_event_sync(c->queued.ev[i]) : 0; /* its last copy is done */
    if (!rc) {
        memcpy(slot, src, bytes);
        rc = spc_memcpy_h2d(c->stream, dst, slot, bytes);
    }
    if (!rc && !(rc = spc_event_record(c->queued.ev[i], c->stream)))
        c->queued_used[i] = true;
    return copy_status(be, rc, "upload", bytes, err);
}

static sp_status cuda_finish(sp_backend *be, sp_error *err);

/* A read into pinned slot `slot`, an event behind it (the chained greedy decode's picks:
 * the host issues the next step before it waits for this one's pick). */
static sp_status cuda_download_queued(sp_backend *be, int slot, const void *src, size_t bytes,
                                      sp_error *err)
{
    cuda_backend *c = cu(be);
    if (slot < 0 || slot >= SP_QUEUED_READS || bytes > SP_QUEUED_READ_BYTES)
        return sp_err(err, SP_ERR_INTERNAL, "cuda:%d: queued read %d of %zu bytes", c->index, slot,
                      bytes);
    int rc = slots_make(&c->reads, SP_QUEUED_READS, SP_QUEUED_READ_BYTES); /* else: the next read tries */
    if (!rc)
        rc = spc_memcpy_d2h(c->stream, slot_at(&c->reads, slot), src, bytes);
    if (!rc)
        rc = spc_event_record(c->reads.ev[slot], c->stream);
    return copy_status(be, rc, "queued read back", bytes, err);
}

static sp_status cuda_download_wait(sp_backend *be, int slot, void *dst, size_t bytes, sp_error *err)
{
    cuda_backend *c = cu(be);
    if (slot < 0 || slot >= SP_QUEUED_READS || bytes > SP_QUEUED_READ_BYTES || !c->reads.ev[slot])
        return sp_err(err, SP_ERR_INTERNAL, "cuda:%d: wait for queued read %d, never issued",
                      c->index, slot);
    int rc = spc_event_sync(c->reads.ev[slot]);
    if (!rc && c->status) /* a launch before it failed: what came back means nothing */
        return cuda_finish(be, err);
    if (rc)
        return copy_status(be, rc, "queued read back", bytes, err);
    memcpy(dst, slot_at(&c->reads, slot), bytes);
    return SP_OK;
}

static sp_status cuda_download(sp_backend *be, void *dst, const void *src, size_t bytes, sp_error *err)
{
    if (!bytes)
        return SP_OK;
    return copy_status(be, spc_memcpy_d2h_sync(cu(be)->stream, dst, src, bytes), "download", bytes,
                       err);
}

static const void *cuda_view(sp_backend *be, const void *p, size_t n, void *staging)
{
    int rc = spc_memcpy_d2h_sync(cu(be)->stream, staging, p, n);
    check(cu(be), "read back", rc);
    return rc ? NULL : staging;
}

static sp_status cuda_finish(sp_backend *be, sp_error *err)
{
    cuda_backend *c = cu(be);
    check(c, "stream sync", spc_stream_sync(c->stream));
    sp_cuda_stager_free(c->stager); /* the load is over: give back its pinned memory */
    c->stager = NULL;
    int st = c->status;
    c->status = 0;
    if (st)
        return sp_err(err, SP_ERR_INTERNAL, "cuda:%d: op %s failed: %s", c->index, c->failed,
                      spc_error_string(st));
    return SP_OK;
}

static uint64_t cuda_free_bytes(sp_backend *be)
{
    size_t fr = 0, tot = 0;
    return spc_mem_info(&fr, &tot) ? 0 : (uint64_t)fr;
}

static void cuda_embed(sp_backend *be, const sp_weight *table, const int32_t *ids, int64_t n,
                       float *out)
{
    check(cu(be), "embed", spc_weight_rows_f32(cu(be)->stream, table, ids, n, out));
}

/* Fast precision: a BF16 matrix the tensor-core kernels take (not one kept exact: a
 * router). Decided per matrix, never by the number of tokens, so the choice keeps every
 * position's arithmetic fixed. */
static bool use_tc(const cuda_backend *c, const sp_weight *w)
{
    return c->fast && !w->keep_exact && spc_tc_weight_ok(w);
}

/* The tensor-core GEMM's scratch: fixed, so that recorded graphs keep a valid address
 * (2048 tokens of 8192 columns; longer passes run in pieces, with the same bits).
 * Allocated when fast precision is turned on, before any pass. */
#define TC_SCRATCH ((size_t)32 << 20)

static size_t tc_scratch_bytes(const cuda_backend *c) { return c->tc_scratch ? TC_SCRATCH : 0; }

static sp_precision cuda_set_precision(sp_backend *be, sp_precision want)
{
    cuda_backend *c = cu(be);
    c->fast = want == SP_PRECISION_FAST && spc_tc_supported();
    if (c->fast && !c->tc_scratch && spc_malloc(&c->tc_scratch, TC_SCRATCH))
        c->tc_scratch = NULL;
    return c->fast ? SP_PRECISION_FAST : SP_PRECISION_EXACT;
}

static void cuda_matmul(sp_backend *be, const sp_weight *w, const float *x, int64_t n, float *y,
                        const float *bias)
{
    cuda_backend *c = cu(be);
    if (use_tc(c, w))
        check(c, "matmul", spc_matmul_tc(c->stream, w, x, n, y, bias, c->tc_scratch,
                                         tc_scratch_bytes(c)));
    else
        check(c, "matmul", spc_matmul(c->stream, w, x, n, y, bias));
    plant(c, "matmul", y, n * w->rows);
}

static void cuda_matmul_t(sp_backend *be, const sp_weight *w, int64_t row0, int64_t n_in,
                          const float *x, int64_t x_stride, int64_t n, float *y, int64_t y_stride,
                          const float *bias)
{
    check(cu(be), "matmul_t",
          spc_matmul_t(cu(be)->stream, w, row0, n_in, x, x_stride, n, y, y_stride, bias));
}

static void cuda_rmsnorm(sp_backend *be, const float *x, int64_t x_stride, const float *w,
                         int64_t rows, int64_t dim, float eps, float *out, int64_t out_stride)
{
    check(cu(be), "rmsnorm",
          spc_rmsnorm(cu(be)->stream, x, x_stride, w, rows, dim, eps, out, out_stride));
    if (out_stride == dim)
        plant(cu(be), "rmsnorm", out, rows * dim);
}

static void cuda_rope(sp_backend *be, float *x, int64_t n, int64_t n_heads, int64_t tok_stride,
                      int64_t head_stride, int64_t rot_dim, const float *cs, bool interleaved)
{
    check(cu(be), "rope",
          spc_rope(cu(be)->stream, x, n, n_heads, tok_stride, head_stride, rot_dim, cs, interleaved));
}

static void cuda_add(sp_backend *be, float *y, const float *x, int64_t n)
{
    check(cu(be), "add", spc_add(cu(be)->stream, y, x, n));
}

static void cuda_swiglu(sp_backend *be, const float *g, const float *u, int64_t n, float *out)
{
    check(cu(be), "swiglu", spc_swiglu(cu(be)->stream, g, u, n, out));
}

static void cuda_gptoss_glu(sp_backend *be, const float *gu, int64_t n, int64_t I, float alpha,
                            float limit, float *out)
{
    check(cu(be), "gptoss_glu", spc_gptoss_glu(cu(be)->stream, gu, n, I, alpha, limit, out));
}

static void cuda_copy2d(sp_backend *be, float *dst, int64_t dst_stride, const float *src,
                        int64_t src_stride, int64_t rows, int64_t width)
{
    check(cu(be), "copy2d",
          spc_copy2d(cu(be)->stream, dst, dst_stride, src, src_stride, rows, width));
}

static void cuda_kv_store(sp_backend *be, float *dst, int64_t dst_stride, const int32_t *pos,
                          const float *src, int64_t src_stride, int64_t rows, int64_t width)
{
    check(cu(be), "kv_store",
          spc_kv_store(cu(be)->stream, dst, dst_stride, pos, src, src_stride, rows, width));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best of 5 copies of 512 MiB, host-timed around a synchronized copy. */
static double cuda_copy_bandwidth(sp_backend *be)
{
    cuda_backend *c = cu(be);
    const size_t n = (size_t)512 << 20;
    void *a = NULL, *b = NULL;
    double best = 0.0;
    if (!spc_malloc(&a, n) && !spc_malloc(&b, n) && !spc_memset(c->stream, a, 1, n) &&
        !spc_stream_sync(c->stream)) {
        for (int i = 0; i < 6; i++) {
            double t0 = now_s();
            if (spc_memcpy_d2d(c->stream, b, a, n) || spc_stream_sync(c->stream))
                break;
            double gbs = 2.0 * (double)n / (now_s() - t0) / 1e9;
            if (i > 0 && gbs > best) /* the first copy warms up */
                best = gbs;
        }
    }
    spc_free(a);
    spc_free(b);
    return best;
}

static void cuda_rope_kv_store(sp_backend *be, const sp_rope_kv_args *a)
{
    check(cu(be), "rope_kv_store",
          spc_rope_kv_store(cu(be)->stream, a->q, a->k, a->v, a->n, a->n_q_heads, a->n_kv_heads,
                            a->head_dim, a->rot_dim, a->v_width, a->cos_sin, a->pos, a->k_cache,
                            a->v_cache));
}

static void cuda_matmul_multi(sp_backend *be, int n, const sp_weight *const *ws, const float *x,
                              int64_t n_tok, float *const *ys, const float *const *biases)
{
    cuda_backend *c = cu(be);
    int n_tc = 0;
    for (int i = 0; i < n; i++)
        n_tc += use_tc(c, ws[i]);
    if (n_tc > 0 && n_tc < n) { /* mixed kinds: each matrix by its own */
        for (int i = 0; i < n; i++)
            cuda_matmul(be, ws[i], x, n_tok, ys[i], biases ? biases[i] : NULL);
        return;
    }
    if (n_tc > 0)
        check(c, "matmul", spc_matmul_tc_multi(c->stream, n, ws, x, n_tok, ys, biases,
                                               c->tc_scratch, tc_scratch_bytes(c)));
    else
        check(c, "matmul", spc_matmul_multi(c->stream, n, ws, x, n_tok, ys, biases));
    for (int i = 0; i < n; i++)
        plant(c, "matmul", ys[i], n_tok * ws[i]->rows);
}

/* Q/K/V, RoPE and the cache writes in one launch (spc_matmul_qkv_rope) in exact precision;
 * the two ops where the kernels decline the shape, in fast precision (the tensor-core rows
 * kernel has no such epilogue), with a fault injected or planted (they name the ops), or
 * with SPECULA_CUDA_QKV_ROPE=0 (to compare). */
static void cuda_matmul_rope_kv(sp_backend *be, const sp_weight *const *ws,
                                const float *const *biases, const float *x, float *v,
                                const sp_rope_kv_args *a)
{
    cuda_backend *c = cu(be);
    if (c->qkv_rope && !c->fail_op && !c->plant_op && a->rot_dim == a->head_dim &&
        !use_tc(c, ws[0]) && !use_tc(c, ws[1]) && !use_tc(c, ws[2])) {
        int rc = spc_matmul_qkv_rope(c->stream, ws, biases, x, a->n, a->q, a->k, v, a->head_dim,
                                     a->cos_sin, a->pos, a->k_cache, a->v_cache);
        if (rc != SPC_NOT_SUPPORTED) {
            check(c, "matmul", rc);
            return;
        }
    }
    float *ys[3] = {a->q, a->k, v};
    cuda_matmul_multi(be, 3, ws, x, a->n, ys, biases);
    cuda_rope_kv_store(be, a);
}

static void cuda_matmul_swiglu(sp_backend *be, const sp_weight *wg, const sp_weight *wu,
                               const float *x, int64_t n_tok, float *out, float *up)
{
    cuda_backend *c = cu(be);
    const bool tc_g = use_tc(c, wg), tc_u = use_tc(c, wu);
    if (tc_g && tc_u && wg->rows == wu->rows && !c->plant_op) {
        check(c, "matmul_swiglu", spc_matmul_tc_swiglu(c->stream, wg, wu, x, n_tok, out,
                                                       c->tc_scratch,
                                                       tc_scratch_bytes(c)));
        return;
    }
    if (!tc_g && !tc_u && wg->format == wu->format && wg->rows == wu->rows &&
        wg->cols == wu->cols && wg->format != SP_WF_F32 && wg->format != SP_WF_F16 &&
        !c->plant_op) {
        check(c, "matmul_swiglu", spc_matmul_swiglu(c->stream, wg, wu, x, n_tok, out));
        return;
    }
    cuda_matmul(be, wg, x, n_tok, out, NULL);
    cuda_matmul(be, wu, x, n_tok, up, NULL);
    check(c, "swiglu", spc_swiglu(c->stream, out, up, n_tok * wg->rows, out));
}

static void cuda_add_rmsnorm(sp_backend *be, float *x, const float *res, const float *w,
                             int64_t rows, int64_t dim, float eps, float *out)
{
    check(cu(be), "add_rmsnorm",
          spc_add_rmsnorm(cu(be)->stream, x, dim, res, dim, w, rows, dim, eps, out, dim));
    plant(cu(be), "rmsnorm", out, rows * dim);
}

static void cuda_scale(sp_backend *be, float *x, int64_t n, float f)
{
    check(cu(be), "scale", spc_scale(cu(be)->stream, x, n, f));
}

/* A fixed scratch (so that recorded graphs keep a valid address) of `bytes`, zeroed,
 * allocated by the first call outside a capture (the first pass of every key runs
 * unrecorded); *p stays NULL when it cannot be had. */
static void scratch_once(cuda_backend *c, void **p, bool *tried, size_t bytes)
{
    if (*tried || c->capturing)
        return;
    *tried = true;
    if (spc_malloc(p, bytes) || spc_memset(c->stream, *p, 0, bytes)) {
        spc_free(*p);
        *p = NULL;
    }
}

/* The split attention's scratch: launches that need more (very long contexts with several
 * queries) run one block per (query, head), with the same bits. */
#define ATTN_SCRATCH ((size_t)16 << 20)

static void cuda_attention(sp_backend *be, const sp_attn_args *a)
{
    cuda_backend *c = cu(be);
    if (c->attn_split != 1)
        scratch_once(c, &c->attn_scratch, &c->attn_tried, ATTN_SCRATCH);
    /* every pass runs after the passes before it have completed (each ends waiting for
     * its work, and its inputs' upload precedes its kernels on the stream) and writes only
     * its own positions' rows: the rows before a segment's first position are complete */
    check(c, "attention",
          spc_attention_split(c->stream, a, c->attn_early ? SPC_ATTN_PAST_READY : 0,
                              c->attn_split, c->attn_scratch, c->attn_scratch ? ATTN_SCRATCH : 0));
    plant(c, "attention", a->out, a->n_tok * a->n_heads * a->v_dim);
}

static void cuda_moe_route(sp_backend *be, const sp_route_cfg *cfg, const float *logits, int64_t n,
                           int32_t *ids, float *w)
{
    check(cu(be), "moe_route", spc_moe_route(cu(be)->stream, cfg, logits, n, ids, w));
}

/* The kernels' view of a: the carve-up sp_moe_scratch_bytes counts (A, B, the gathered
 * inputs, the grouping). */
static spc_moe_args moe_args(cuda_backend *c, const sp_moe_args *a)
{
    int64_t wide = 2 * a->inter > a->n_embd ? 2 * a->inter : a->n_embd;
    int64_t P = a->n_tok * a->top_k;
    float *sa = a->scratch;
    float *sc = sa + 2 * P * wide;
    int32_t *gi = (int32_t *)(sc + ((P * a->n_embd + 15) & ~(int64_t)15));
    spc_moe_args g = {
        .experts = (const spc_expert *)a->experts,
        .n_experts = a->n_experts,
        .act = a->glu == SP_GLU_GPTOSS         ? SPC_ACT_GPTOSS_GLU
               : a->glu == SP_GLU_SWIGLU_LIMIT ? SPC_ACT_SWIGLU_LIMIT
                                               : SPC_ACT_SWIGLU,
        .H = a->n_embd,
        .I = a->inter,
        .alpha = a->alpha,
        .limit = a->limit,
        .x = a->x,
        .n_tok = a->n_tok,
        .k = a->top_k,
        .ids = a->ids,
        .w = a->w,
        .out = a->out,
        .scratch_a = sa,
        .scratch_b = sa + P * wide,
        .row_fmt = a->row_format,
        .row_major_only = a->row_major_only,
        .scratch_c = c->moe_group ? sc : NULL,
        .group_ints = c->moe_group ? gi : NULL,
        .fast = c->fast,
        .then_x = a->then_x,
        .then_w = a->then_w,
        .then_eps = a->then_eps,
        .then_xn = a->then_xn,
    };
    if (c->expert_steps)
        memcpy(&g.steps, &a->steps, sizeof g.steps); /* mirrors (asserted above) */
    return g;
}

static void cuda_moe_ffn(sp_backend *be, const sp_moe_args *a)
{
    spc_moe_args g = moe_args(cu(be), a);
    check(cu(be), "moe_ffn", spc_moe_ffn(cu(be)->stream, &g));
    plant(cu(be), "moe_ffn", a->out, a->n_tok * a->n_embd);
}

/* Routing folded into the expert pass where the kernels can (spc_moe_route_ffn;
 * SPECULA_CUDA_MOE_FOLD=0: the two launches, to compare). */
static void cuda_moe_route_ffn(sp_backend *be, const sp_route_cfg *cfg, const float *logits,
                               int32_t *ids, float *w, const sp_moe_args *a)
{
    cuda_backend *c = cu(be);
    if (!c->moe_fold || c->fail_op) { /* a planted failure names the op it hit */
        cuda_moe_route(be, cfg, logits, a->n_tok, ids, w);
        cuda_moe_ffn(be, a);
        return;
    }
    spc_moe_args g = moe_args(c, a);
    check(c, "moe_ffn", spc_moe_route_ffn(c->stream, cfg, logits, ids, w, &g));
    plant(c, "moe_ffn", a->out, a->n_tok * a->n_embd);
}

/* The greedy picks' scratch (one launch splits up to about 500 rows of gpt-oss's
 * vocabulary; more rows take a block each, the same ids). */
#define ARGMAX_SCRATCH ((size_t)256 << 10)

static void cuda_logits_argmax(sp_backend *be, const float *logits, int64_t rows, int64_t n_vocab,
                               int32_t *ids)
{
    cuda_backend *c = cu(be);
    if (c->argmax_split)
        scratch_once(c, &c->argmax_scratch, &c->argmax_tried, ARGMAX_SCRATCH);
    check(c, "logits_argmax",
          spc_logits_argmax(c->stream, logits, rows, n_vocab, n_vocab, ids, c->argmax_scratch,
                            c->argmax_scratch ? ARGMAX_SCRATCH : 0));
}

/* Draws on the device (cuda_sample.cu), SPC_SAMPLE_MAX_ROWS rows a launch; the scratch is
 * made by the first call (never while a pass records: a pass records only after running
 * once). Without it every id is -1 and the host draws. A call with another vocabulary (a
 * backend serves one model, so only in tests) drops the recorded passes before it frees
 * the scratch they name. */
/* The draws' scratch for n_vocab (also the speculative verification's: as large as both
 * need), made by the first call outside a recording; whether it is there. A call with
 * another vocabulary (a backend serves one model, so only in tests) drops the recorded
 * passes before it frees the scratch they name. */
static bool sample_scratch(cuda_backend *c, int64_t n_vocab)
{
    const size_t a = spc_sample_scratch_bytes(SPC_SAMPLE_MAX_ROWS, n_vocab);
    const size_t b = spc_spec_scratch_bytes(n_vocab);
    const size_t bytes = a && b ? (a > b ? a : b) : 0;
    if (c->sample_vocab != n_vocab && !c->capturing && bytes) {
        if (c->sample_scratch)
            sp_rec_clear(&c->rec);
        spc_free(c->sample_scratch);
        c->sample_scratch = NULL;
        c->sample_vocab = spc_malloc(&c->sample_scratch, bytes) ||
                                  spc_memset(c->stream, c->sample_scratch, 0, bytes)
                              ? 0 : n_vocab; /* the kernels' counters start at 0 */
        c->sample_bytes = c->sample_vocab ? bytes : 0;
    }
    return c->sample_vocab == n_vocab;
}

/* Draws on the device (cuda_sample.cu), SPC_SAMPLE_MAX_ROWS rows a launch. Without the
 * scratch (never made while a pass records: a pass records only after running once) every
 * id is -1 and the host draws. */
static void cuda_logits_sample(sp_backend *be, const float *logits, int64_t rows, int64_t n_vocab,
                               const sp_sample_req *reqs, int32_t *ids)
{
    cuda_backend *c = cu(be);
    if (!sample_scratch(c, n_vocab)) {
        check(c, "logits_sample", spc_memset(c->stream, ids, 0xff, (size_t)rows * sizeof *ids));
        return;
    }
    for (int64_t r = 0; r < rows; r += SPC_SAMPLE_MAX_ROWS) {
        const int64_t n = rows - r < SPC_SAMPLE_MAX_ROWS ? rows - r : SPC_SAMPLE_MAX_ROWS;
        check(c, "logits_sample",
              spc_sample_rows(c->stream, logits + r * n_vocab, n, n_vocab, n_vocab, reqs + r, ids + r,
                              c->sample_scratch, c->sample_bytes));
    }
}

/* Speculative verification on the device (cuda_spec_verify.cu); without the scratch
 * out[0] = -1 and the host verifies. */
static void cuda_spec_verify(sp_backend *be, const float *target, const float *draft, int64_t m,
                             int64_t n_vocab, const sp_sample_req *reqs, const sp_spec_args *args,
                             int32_t *out)
{
    cuda_backend *c = cu(be);
    if (!sample_scratch(c, n_vocab)) {
        check(c, "spec_verify", spc_memset(c->stream, out, 0xff, 2 * sizeof *out));
        return;
    }
    check(c, "spec_verify", spc_spec_verify(c->stream, target, draft, m, n_vocab, reqs, args, out,
                                            c->sample_scratch, c->sample_bytes));
}

/* ---- DeepSeek-V4 ----------------------------------------------------------------- */

static void cuda_hc_weights(sp_backend *be, const float *mix, int64_t mix_stride, const float *base,
                            const float *scale, int64_t n, int64_t N, int64_t iters, float eps,
                            float *pre, float *post, float *comb)
{
    check(cu(be), "hc_weights",
          spc_hc_weights(cu(be)->stream, mix, mix_stride, base, scale, n, N, iters, eps, pre, post, comb));
}

static void cuda_hc_collapse(sp_backend *be, const float *streams, const float *pre, int64_t n,
                             int64_t N, int64_t H, float *out)
{
    check(cu(be), "hc_collapse", spc_hc_collapse(cu(be)->stream, streams, pre, n, N, H, out));
}

static void cuda_hc_expand(sp_backend *be, const float *streams, const float *y, const float *post,
                           const float *comb, int64_t n, int64_t N, int64_t H, float *out)
{
    check(cu(be), "hc_expand", spc_hc_expand(cu(be)->stream, streams, y, post, comb, n, N, H, out));
}

static void cuda_rope_tail(sp_backend *be, float *x, int64_t n, int64_t n_heads, int64_t tok_stride,
                           int64_t head_stride, int64_t rot, const float *cs, bool inverse)
{
    check(cu(be), "rope_tail",
          spc_rope_tail(cu(be)->stream, x, n, n_heads, tok_stride, head_stride, rot, cs, inverse));
}

static void cuda_compress(sp_backend *be, const sp_compress_args *a, int64_t w0, int64_t w1,
                          const float *cs, float *out, int64_t out_stride)
{
    check(cu(be), "compress", spc_compress(cu(be)->stream, a, w0, w1, cs, out, out_stride));
}

/* The indexer's queue [n_tok, entries] in device memory, grown when a pass needs more
 * (after the stream drains: the old one may still be read). V4 passes are never recorded,
 * so no graph holds the old address. */
static void cuda_index_topk(sp_backend *be, const sp_index_batch *b)
{
    cuda_backend *c = cu(be);
    size_t need = 0;
    int rc = spc_index_queue_bytes(b, &need);
    if (!rc && need > c->index_queue_bytes) {
        rc = spc_stream_sync(c->stream);
        spc_free(c->index_queue);
        c->index_queue = NULL;
        c->index_queue_bytes = 0;
        if (!rc && !(rc = spc_malloc(&c->index_queue, need)))
            c->index_queue_bytes = need;
    }
    if (!rc)
        rc = spc_index_topk(c->stream, b, c->index_queue, c->index_queue_bytes);
    check(c, "index_topk", rc);
}

static void cuda_dsv4_attention(sp_backend *be, const sp_dsv4_attn_args *a)
{
    check(cu(be), "dsv4_attention", spc_dsv4_attention(cu(be)->stream, a));
    plant(cu(be), "dsv4_attention", a->out, a->n_tok * a->n_heads * a->hd);
}

static void cuda_swiglu_limit(sp_backend *be, const float *gate, const float *up, int64_t n,
                              float limit, float *out)
{
    check(cu(be), "swiglu_limit", spc_swiglu_limit(cu(be)->stream, gate, up, n, limit, out));
}

/* ---- recording ------------------------------------------------------------------- */

static bool cuda_replay(sp_backend *be, sp_rec_key key)
{
    cuda_backend *c = cu(be);
    void *g = c->graphs ? sp_rec_find(&c->rec, key) : NULL;
    if (!g)
        return false;
    sp_replay_clock_before(c->clock, c->stream);
    check(c, "graph launch", spc_graph_launch(c->stream, g));
    sp_replay_clock_after(c->clock, c->stream);
    return true;
}

static bool cuda_record_begin(sp_backend *be, sp_rec_key key)
{
    cuda_backend *c = cu(be);
    sp_rec_slot *s = c->graphs && !c->status ? sp_rec_want(&c->rec, key) : NULL;
    if (!s || spc_capture_begin(c->stream)) {
        if (s)
            s->failed = true;
        return false;
    }
    c->capturing = s;
    return true;
}

static bool cuda_record_end(sp_backend *be)
{
    cuda_backend *c = cu(be);
    sp_rec_slot *s = c->capturing;
    void *g = NULL;
    c->capturing = NULL;
    int rc = spc_capture_end(c->stream, &g);
    if (rc || !g || c->status) {
        /* nothing ran: the caller issues the ops again, unrecorded, and a real launch
         * error shows there */
        spc_graph_free(g);
        s->failed = true;
        c->status = 0;
        return false;
    }
    s->rec = g;
    check(c, "graph launch", spc_graph_launch(c->stream, g));
    return true;
}

static const sp_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .upload_queued = cuda_upload_queued,
    .download_queued = cuda_download_queued,
    .download_wait = cuda_download_wait,
    .view = cuda_view,
    .finish = cuda_finish,
    .free_bytes = cuda_free_bytes,
    .set_precision = cuda_set_precision,
    .embed = cuda_embed,
    .matmul = cuda_matmul,
    .matmul_t = cuda_matmul_t,
    .rmsnorm = cuda_rmsnorm,
    .rope = cuda_rope,
    .add = cuda_add,
    .swiglu = cuda_swiglu,
    .gptoss_glu = cuda_gptoss_glu,
    .copy2d = cuda_copy2d,
    .kv_store = cuda_kv_store,
    .rope_kv_store = cuda_rope_kv_store,
    .matmul_rope_kv = cuda_matmul_rope_kv,
    .copy_bandwidth = cuda_copy_bandwidth,
    .scale = cuda_scale,
    .matmul_multi = cuda_matmul_multi,
    .matmul_swiglu = cuda_matmul_swiglu,
    .add_rmsnorm = cuda_add_rmsnorm,
    .attention = cuda_attention,
    .moe_route = cuda_moe_route,
    .moe_ffn = cuda_moe_ffn,
    .moe_route_ffn = cuda_moe_route_ffn,
    .logits_argmax = cuda_logits_argmax,
    .logits_sample = cuda_logits_sample,
    .spec_verify = cuda_spec_verify,
    .replay = cuda_replay,
    .record_begin = cuda_record_begin,
    .record_end = cuda_record_end,
    .hc_weights = cuda_hc_weights,
    .hc_collapse = cuda_hc_collapse,
    .hc_expand = cuda_hc_expand,
    .rope_tail = cuda_rope_tail,
    .compress = cuda_compress,
    .index_topk = cuda_index_topk,
    .dsv4_attention = cuda_dsv4_attention,
    .swiglu_limit = cuda_swiglu_limit,
};

int sp_cuda_backend_devices(void) { return spc_device_count(); }

const char *sp_cuda_backend_why_none(void)
{
    return "no NVIDIA GPU or driver found (cudaGetDeviceCount reports none)";
}

static const char *env_or_null(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* A schedule knob that is on unless the environment sets it to "0". */
static bool env_on(const char *name)
{
    const char *v = env_or_null(name);
    return !(v && !strcmp(v, "0"));
}

sp_status sp_cuda_backend_new(int index, sp_backend **out, sp_error *err)
{
    *out = NULL;
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    spc_device_info info;
    int rc = spc_device_open(index, &info, &c->stream);
    if (rc) {
        free(c);
        return sp_err(err, SP_ERR_UNSUPPORTED, "cuda:%d: cannot open the device: %s", index,
                      spc_error_string(rc));
    }
    c->index = index;
    c->ops = cuda_ops;
    if (!env_on("SPECULA_CUDA_ARGMAX"))
        c->ops.logits_argmax = NULL;
    if (!env_on("SPECULA_CUDA_SAMPLE")) /* sampled rows read back and drawn on the host */
        c->ops.logits_sample = NULL;
    if (!env_on("SPECULA_CUDA_SPEC")) /* speculative sampling verified on the host */
        c->ops.spec_verify = NULL;
    if (!env_on("SPECULA_CUDA_CHAIN")) /* greedy steps each read back before the next */
        c->ops.download_queued = NULL, c->ops.download_wait = NULL;
    c->base.ops = &c->ops;
    c->base.total_bytes = info.total_mem;
    c->fail_op = env_or_null("SPECULA_CUDA_FAIL_OP");
    c->plant_op = env_or_null("SPECULA_CUDA_PLANT_BUG");
    c->graphs = !c->fail_op && !c->plant_op && env_on("SPECULA_CUDA_GRAPHS");
    c->moe_group = env_on("SPECULA_CUDA_MOE_GROUP");
    c->moe_fold = env_on("SPECULA_CUDA_MOE_FOLD");
    c->expert_steps = env_on("SPECULA_CUDA_EXPERT_STEPS");
    c->attn_early = env_on("SPECULA_CUDA_ATTN_EARLY");
    c->qkv_rope = env_on("SPECULA_CUDA_QKV_ROPE");
    /* the expert sum, residual add and next norm in one launch (SPECULA_CUDA_MOE_NORM=0:
     * off, to compare); not where a planted bug or failure must reach the ops as issued */
    c->base.moe_adds_norm = !c->fail_op && !c->plant_op && env_on("SPECULA_CUDA_MOE_NORM");
    c->staged_upload = env_on("SPECULA_CUDA_STAGED_UPLOAD");
    c->queued_on = env_on("SPECULA_CUDA_QUEUED_UPLOAD");
    c->argmax_split = env_on("SPECULA_CUDA_ARGMAX_SPLIT");
    const char *as = env_or_null("SPECULA_CUDA_ATTN_SPLIT");
    c->attn_split = !as ? 0 : atoi(as) > 1 ? atoi(as) : 1;
    const char *rt = env_or_null("SPECULA_CUDA_REPLAY_TIMES");
    if (rt && !strcmp(rt, "1"))
        c->clock = sp_replay_clock_new();
    c->rec.free_rec = spc_graph_free;
    c->base.device_index = index;
    snprintf(c->base.device_name, sizeof c->base.device_name, "cuda:%d %s (sm_%d%d, %.1f GiB)",
             index, info.name, info.cc_major, info.cc_minor, info.total_mem / 1073741824.0);
    *out = &c->base;
    return SP_OK;
}

#endif /* SPECULA_HAVE_CUDA */
