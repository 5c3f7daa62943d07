/* dsv4.c: DeepSeek-V4 kernels on the CPU (see dsv4.h). Scalar on purpose: the matrix
 * work of the architecture goes through the tiled matmul; what is here is per-row
 * glue whose cost is small next to it, kept in the reference's order of operations. */
#include "kernels/cpu/dsv4.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/topk_torch.h"

#include <math.h>
#include <string.h>

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static void sinkhorn(float *comb, int64_t N, int64_t iters, float eps)
{
    for (int64_t it = 0; it < iters; it++) {
        if (it > 0)
            for (int64_t i = 0; i < N; i++) { /* rows */
                float s = 0.0f;
                for (int64_t j = 0; j < N; j++)
                    s += comb[i * N + j];
                for (int64_t j = 0; j < N; j++)
                    comb[i * N + j] /= s + eps;
            }
        for (int64_t j = 0; j < N; j++) { /* columns */
            float s = 0.0f;
            for (int64_t i = 0; i < N; i++)
                s += comb[i * N + j];
            for (int64_t i = 0; i < N; i++)
                comb[i * N + j] /= s + eps;
        }
    }
}

void sp_hc_weights(const float *mix, const float *base, const float *scale, int64_t N,
                   int64_t iters, float eps, float *pre, float *post, float *comb)
{
    for (int64_t k = 0; k < N; k++)
        pre[k] = sigmoidf(mix[k] * scale[0] + base[k]) + eps;
    if (!post)
        return;
    for (int64_t k = 0; k < N; k++)
        post[k] = 2.0f * sigmoidf(mix[N + k] * scale[1] + base[N + k]);
    for (int64_t i = 0; i < N; i++) { /* softmax over each row, then + eps */
        float *r = comb + i * N;
        float mx = -INFINITY;
        for (int64_t j = 0; j < N; j++) {
            r[j] = mix[2 * N + i * N + j] * scale[2] + base[2 * N + i * N + j];
            mx = r[j] > mx ? r[j] : mx;
        }
        float s = 0.0f;
        for (int64_t j = 0; j < N; j++) {
            r[j] = expf(r[j] - mx);
            s += r[j];
        }
        for (int64_t j = 0; j < N; j++)
            r[j] = r[j] / s + eps;
    }
    sinkhorn(comb, N, iters, eps);
}

void sp_hc_collapse(const float *streams, const float *pre, int64_t N, int64_t H, float *out)
{
    for (int64_t d = 0; d < H; d++) {
        float s = 0.0f;
        for (int64_t k = 0; k < N; k++)
            s += pre[k] * streams[k * H + d];
        out[d] = s;
    }
}

void sp_hc_expand(const float *streams, const float *y, const float *post, const float *comb,
                  int64_t N, int64_t H, float *out)
{
    for (int64_t k = 0; k < N; k++)
        for (int64_t d = 0; d < H; d++) {
            float s = 0.0f;
            for (int64_t j = 0; j < N; j++)
                s += comb[j * N + k] * streams[j * H + d];
            out[k * H + d] = post[k] * y[d] + s;
        }
}

void sp_rope_tail(float *x, int64_t rot, const float *cs, bool inverse)
{
    int64_t h = rot / 2;
    for (int64_t i = 0; i < h; i++) {
        float c = cs[i], s = inverse ? -cs[h + i] : cs[h + i];
        float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = b * c + a * s;
    }
}

/* One slot of entry w: the value and gate of channel d (NULL gate: empty slot). */
static void slot(const sp_compress_args *a, int64_t w, int64_t s, int64_t d, float *v, float *g)
{
    int64_t m = a->rate, hd = a->hd;
    if (!a->overlap) {
        const int64_t p = w * m + s;
        *v = a->kv[p * a->stride + d];
        *g = a->gate[p * a->stride + d] + a->ape[s * hd + d];
        return;
    }
    if (s < m) { /* previous window's first half */
        if (w == 0) {
            *v = 0.0f;
            *g = -INFINITY;
            return;
        }
        int64_t p = (w - 1) * m + s;
        *v = a->kv[p * a->stride + d];
        *g = a->gate[p * a->stride + d] + a->ape[s * 2 * hd + d];
        return;
    }
    int64_t p = w * m + (s - m);
    *v = a->kv[p * a->stride + hd + d];
    *g = a->gate[p * a->stride + hd + d] + a->ape[(s - m) * 2 * hd + hd + d];
}

void sp_compress_entry(const sp_compress_args *a, int64_t w, const float *cs, float *out)
{
    int64_t slots = a->overlap ? 2 * a->rate : a->rate;
    for (int64_t d = 0; d < a->hd; d++) {
        float mx = -INFINITY, v, g;
        for (int64_t s = 0; s < slots; s++) {
            slot(a, w, s, d, &v, &g);
            mx = g > mx ? g : mx;
        }
        float den = 0.0f;
        for (int64_t s = 0; s < slots; s++) {
            slot(a, w, s, d, &v, &g);
            den += expf(g - mx);
        }
        float acc = 0.0f;
        for (int64_t s = 0; s < slots; s++) {
            slot(a, w, s, d, &v, &g);
            acc += v * (expf(g - mx) / den);
        }
        out[d] = acc;
    }
    sp_rmsnorm(out, a->norm, 1, a->hd, a->eps, out);
    sp_rope_tail(out + a->hd - a->rot, a->rot, cs, false);
}

void sp_index_topk(const sp_index_args *a, int32_t *sel, sp_topk_elem *q)
{
    float ss = 1.0f / sqrtf((float)a->hd), ws = 1.0f / sqrtf((float)a->n_heads);
    int64_t nq = a->n_queue > a->n_valid ? a->n_queue : a->n_valid;
    for (int64_t s = 0; s < nq; s++) {
        q[s].i = s;
        q[s].v = -INFINITY;
        if (s >= a->n_valid)
            continue;
        const float *k = a->keys + s * a->key_stride;
        float tot = 0.0f;
        for (int64_t h = 0; h < a->n_heads; h++) {
            const float *qh = a->q + h * a->hd;
            float dot = 0.0f;
            for (int64_t d = 0; d < a->hd; d++)
                dot += qh[d] * k[d];
            tot += (fmaxf(dot, 0.0f) * ss) * (a->w[h] * ws);
        }
        q[s].v = tot;
    }
    for (int64_t j = 0; j < a->topk; j++)
        sel[j] = -1;
    int64_t k = a->topk < nq ? a->topk : nq, n = 0;
    if (k <= 0)
        return;
    sp_topk_torch(q, nq, k);
    for (int64_t j = 0; j < k; j++)
        if (q[j].i < a->n_valid)
            sel[n++] = (int32_t)q[j].i;
    for (int64_t i = 1; i < n; i++) /* ascending */
        for (int64_t j = i; j > 0 && sel[j - 1] > sel[j]; j--) {
            int32_t t = sel[j];
            sel[j] = sel[j - 1];
            sel[j - 1] = t;
        }
}

/* The key rows a query at position pos attends to, into rows[] (returns the count). */
static int64_t gather_keys(const sp_dsv4_attn_args *a, int64_t t, const float **rows)
{
    int64_t pos = a->pos0 + t, n = 0;
    int64_t lo = pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    for (int64_t j = lo; j <= pos; j++)
        rows[n++] = a->kv + j * a->kv_stride;
    if (!a->comp)
        return n;
    if (a->sel) {
        for (int64_t j = 0; j < a->n_sel; j++) {
            int32_t e = a->sel[t * a->n_sel + j];
            if (e >= 0)
                rows[n++] = a->comp + e * a->comp_stride;
        }
        return n;
    }
    for (int64_t e = 0; e < (pos + 1) / a->rate; e++)
        rows[n++] = a->comp + e * a->comp_stride;
    return n;
}

static void attend_head(const sp_dsv4_attn_args *a, const float *q, const float *const *rows,
                        int64_t n, float sink, float *p, float *out)
{
    float mx = sink;
    for (int64_t j = 0; j < n; j++) {
        float dot = 0.0f;
        for (int64_t d = 0; d < a->hd; d++)
            dot += q[d] * rows[j][d];
        p[j] = dot * a->scale;
        mx = p[j] > mx ? p[j] : mx;
    }
    float den = expf(sink - mx);
    for (int64_t j = 0; j < n; j++) {
        p[j] = expf(p[j] - mx);
        den += p[j];
    }
    memset(out, 0, (size_t)a->hd * sizeof *out);
    for (int64_t j = 0; j < n; j++) {
        float pj = p[j] / den;
        for (int64_t d = 0; d < a->hd; d++)
            out[d] += pj * rows[j][d];
    }
}

void sp_dsv4_attention(const sp_dsv4_attn_args *a, const float **rows)
{
    for (int64_t t = 0; t < a->n_tok; t++) {
        int64_t n = gather_keys(a, t, rows);
        for (int64_t h = 0; h < a->n_heads; h++)
            attend_head(a, a->q + t * a->q_stride + h * a->hd, rows, n,
                        a->sinks ? a->sinks[h] : -INFINITY, a->scratch,
                        a->out + (t * a->n_heads + h) * a->hd);
    }
}

void sp_swiglu_limit(const float *gate, const float *up, int64_t n, float limit, float *out)
{
    for (int64_t i = 0; i < n; i++) {
        float g = fminf(gate[i], limit);
        float u = fminf(fmaxf(up[i], -limit), limit);
        out[i] = sp_silu(g) * u;
    }
}
