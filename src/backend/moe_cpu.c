/* moe_cpu.c: the expert sum of a mixture-of-experts layer on the CPU.
 *
 *   selections (t, j) grouped by expert, in token order within an expert
 *   y_e = expert_e(x rows routed to e)        one batched matmul per expert (a row's
 *                                             result does not depend on its group: matmul.h)
 *   out[t] = sum over the token's experts in ascending id of w[t, j] * y       (fp32)
 *
 * With few selections (decode, a verify pass: at most GROUPED_ROWS) the experts' products
 * run side by side: every expert's gate/up product in one parallel-for, the activation
 * over all their rows, every down product in a second (sp_matmul_each), instead of two
 * joins per expert; each product is the one the per-expert loop computes, bit for bit.
 *
 * The order of the weighted sum is fixed per token (ascending expert id, as transformers'
 * index_add_ loop), so a token's output never depends on which tokens share its batch. */
#include "backend/backend_cpu.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/dsv4.h"
#include "kernels/cpu/ops.h"
#include "util/ckd.h"

#include <string.h>

/* The scratch carve-up, in the order sp_moe_scratch_bytes counts it. */
typedef struct moe_scratch {
    int32_t *count; /* [E + 1] selections per expert, then prefix offsets */
    int32_t *fill;  /* [E] */
    int32_t *list;  /* [n * k] selections (t * k + j) grouped by expert */
    float *xg;      /* [rows, H] inputs gathered for one expert (all experts, grouped) */
    float *g, *u;   /* [rows, 2I] */
    float *y;       /* [rows, H] one expert's outputs (all experts', grouped) */
    float *slots;   /* [n * k, H] every selection's expert output */
} moe_scratch;

static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Most selections (tokens x top-k) whose experts run side by side. */
#define GROUPED_ROWS 64

/* Rows of the per-expert buffers for up to n tokens: n for one expert at a time, every
 * selection's when they run side by side. Never falls as n grows: scratch sized for a
 * pass of n tokens serves every shorter pass (10 tokens of top-3 run grouped, 30 rows;
 * 30 tokens do not, 30 rows). */
static int64_t buffer_rows(int64_t n, int64_t k)
{
    int64_t grouped = n * k < GROUPED_ROWS ? n * k : GROUPED_ROWS;
    return grouped > n ? grouped : n;
}

size_t sp_moe_scratch_bytes(int64_t n, int64_t k, int64_t E, int64_t H, int64_t I)
{
    size_t ints = align16((size_t)E + 1) + align16((size_t)E) + align16((size_t)(n * k));
    int64_t rows = buffer_rows(n, k);
    size_t cpu_floats = align16((size_t)(rows * H)) * 2 + align16((size_t)(rows * 2 * I)) * 2 +
                        align16((size_t)(n * k * H));
    /* a GPU (backend_cuda.c): two buffers of [n k, max(2I, H)], the inputs gathered by
     * expert [n k, H] and the grouping's 4 n k + 1 ints */
    size_t wide = (size_t)(2 * I > H ? 2 * I : H);
    size_t gpu_floats = 2 * (size_t)(n * k) * wide + align16((size_t)(n * k * H)) +
                        align16(4 * (size_t)(n * k) + 1);
    size_t floats = cpu_floats > gpu_floats ? cpu_floats : gpu_floats;
    return (ints + floats) * 4;
}

static moe_scratch carve(const sp_moe_args *a)
{
    int64_t n = a->n_tok, k = a->top_k, E = a->n_experts, H = a->n_embd, I = a->inter;
    moe_scratch s;
    int32_t *ip = a->scratch;
    s.count = ip;
    ip += align16((size_t)E + 1);
    s.fill = ip;
    ip += align16((size_t)E);
    s.list = ip;
    ip += align16((size_t)(n * k));
    int64_t rows = buffer_rows(n, k);
    float *fp = (float *)ip;
    s.xg = fp;
    fp += align16((size_t)(rows * H));
    s.g = fp;
    fp += align16((size_t)(rows * 2 * I));
    s.u = fp;
    fp += align16((size_t)(rows * 2 * I));
    s.y = fp;
    fp += align16((size_t)(rows * H));
    s.slots = fp;
    return s;
}

/* Groups the (token, slot) selections by expert: list[count[e] .. count[e + 1]). */
static void group_by_expert(moe_scratch *s, const int32_t *ids, int64_t n, int64_t E, int64_t k)
{
    memset(s->count, 0, (size_t)(E + 1) * sizeof *s->count);
    for (int64_t i = 0; i < n * k; i++)
        s->count[ids[i] + 1]++;
    for (int64_t e = 0; e < E; e++)
        s->count[e + 1] += s->count[e];
    memcpy(s->fill, s->count, (size_t)E * sizeof *s->fill);
    for (int64_t i = 0; i < n * k; i++) /* token order within an expert */
        s->list[s->fill[ids[i]]++] = (int32_t)i;
}

/* out[t] = sum of w * y over the token's selections in ascending expert id. */
static void weighted_sum(const sp_moe_args *a, const moe_scratch *s)
{
    int64_t k = a->top_k, H = a->n_embd;
    for (int64_t t = 0; t < a->n_tok; t++) {
        const int32_t *ids = a->ids + t * k;
        float *out = a->out + t * H;
        memset(out, 0, (size_t)H * sizeof(float));
        int32_t done = -1;
        for (int64_t j = 0; j < k; j++) {
            int64_t pick = -1;
            for (int64_t q = 0; q < k; q++)
                if (ids[q] > done && (pick < 0 || ids[q] < ids[pick]))
                    pick = q;
            done = ids[pick];
            float wv = a->w[t * k + pick];
            const float *y = s->slots + (size_t)(t * k + pick) * (size_t)H;
            for (int64_t h = 0; h < H; h++) {
                float p = y[h] * wv;
                out[h] += p;
            }
        }
    }
}

/* Products of experts [e0, e1), each over its rows of in (row stride in_w; the range's
 * first row is row 0) into out (row stride out_w); which: 0 gate (or gpt-oss's gate_up),
 * 1 up, 2 down. The products sp_matmul computes run side by side (sp_matmul_each, the
 * same bits); input-major ones (gpt-oss's unquantized experts) one by one. */
static void expert_products(sp_backend *be, const sp_moe_args *a, const moe_scratch *s, int64_t e0,
                            int64_t e1, int which, const float *in, int64_t in_w, float *out,
                            int64_t out_w)
{
    enum { MAX_E = 64 };
    const sp_weight *ws[MAX_E];
    const float *xs[MAX_E], *bs[MAX_E];
    float *ys[MAX_E];
    int64_t ns[MAX_E];
    int n = 0;
    for (int64_t e = e0; e < e1; e++) {
        int64_t b = s->count[e] - s->count[e0], cnt = s->count[e + 1] - s->count[e];
        if (!cnt)
            continue;
        const sp_expert *x = &a->experts[e];
        const sp_weight *w = which == 0 ? &x->gate : which == 1 ? &x->up : &x->down;
        const float *bias = a->glu != SP_GLU_GPTOSS ? NULL : which == 0 ? x->gate_up_bias : x->down_bias;
        if (x->in_major) {
            be->ops->matmul_t(be, w, 0, which == 2 ? a->inter : a->n_embd, in + b * in_w, in_w, cnt,
                              out + b * out_w, out_w, bias);
            continue;
        }
        ws[n] = w, bs[n] = bias, xs[n] = in + b * in_w, ys[n] = out + b * out_w, ns[n] = cnt;
        if (++n == MAX_E) {
            sp_matmul_each(sp_cpu_backend_pool(be), n, ws, xs, ns, ys, bs);
            n = 0;
        }
    }
    sp_matmul_each(sp_cpu_backend_pool(be), n, ws, xs, ns, ys, bs);
}

/* Experts [e0, e1) over their selections: inputs gathered, products, activation, outputs
 * back to each selection's slot. */
static void run_experts(sp_backend *be, const sp_moe_args *a, moe_scratch *s, int64_t e0, int64_t e1)
{
    int64_t base = s->count[e0], rows = s->count[e1] - base, H = a->n_embd, I = a->inter;
    const int32_t *list = s->list + base;
    if (!rows)
        return;
    for (int64_t r = 0; r < rows; r++)
        memcpy(s->xg + r * H, a->x + (list[r] / a->top_k) * H, (size_t)H * sizeof(float));
    if (a->glu == SP_GLU_GPTOSS) {
        expert_products(be, a, s, e0, e1, 0, s->xg, H, s->g, 2 * I);
        be->ops->gptoss_glu(be, s->g, rows, I, a->alpha, a->limit, s->u);
        expert_products(be, a, s, e0, e1, 2, s->u, I, s->y, H);
    } else {
        expert_products(be, a, s, e0, e1, 0, s->xg, H, s->g, I);
        expert_products(be, a, s, e0, e1, 1, s->xg, H, s->u, I);
        if (a->glu == SP_GLU_SWIGLU_LIMIT)
            sp_swiglu_limit(s->g, s->u, rows * I, a->limit, s->g);
        else
            sp_swiglu(s->g, s->u, rows * I, s->g);
        expert_products(be, a, s, e0, e1, 2, s->g, I, s->y, H);
    }
    for (int64_t r = 0; r < rows; r++)
        memcpy(s->slots + (size_t)list[r] * (size_t)H, s->y + r * H, (size_t)H * sizeof(float));
}

void sp_cpu_moe_ffn(sp_backend *be, const sp_moe_args *a)
{
    moe_scratch s = carve(a);
    group_by_expert(&s, a->ids, a->n_tok, a->n_experts, a->top_k);
    if (a->n_tok * a->top_k <= GROUPED_ROWS) /* the experts side by side */
        run_experts(be, a, &s, 0, a->n_experts);
    else
        for (int64_t e = 0; e < a->n_experts; e++)
            run_experts(be, a, &s, e, e + 1);
    weighted_sum(a, &s);
}
