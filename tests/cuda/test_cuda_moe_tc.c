/* test_cuda_moe_tc.c: MXFP4 experts in fast precision on tensor cores (cuda_moe_tc.cu).
 * Each stage's products (gate_up, SwiGLU's up, down) against a double-precision reference
 * of the same rounded inputs (x to BF16, the weights exactly as sp_weight_at decodes them;
 * scales from 2^-127 to 2^127 and NaN included), then the whole expert pass: each token
 * alone equals the batch, pairs grouped by expert equal pairs alone, bit for bit, and the
 * pass stays within BF16 rounding of the exact one; gpt-oss's routing folded into the pass
 * equals the routing launch before it; the residual step folded into the expert sum's
 * launch equals the ops it replaces. Without a GPU every test skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define CUDA_TEST_SEED 0x4d6f45746346e201ull
#include "cuda_test_harness.h"
#include "backend/backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/cuda_ops.h"
#include "util/dtype.h"
#include "../unit/test_weight_layout.h"

static float bf16_round(float f) { return sp_bf16_to_f32(sp_f32_to_bf16(f)); }

/* An MXFP4 matrix: random codes, scales 2^-7 .. 2^4, and in `special` of 1000 blocks a
 * scale from the edges (2^-127 .. 2^127; 255, NaN, only where nan_ok). */
typedef struct fp4_matrix {
    sp_weight h, d;
    unsigned char *hdata, *hscales;
    void *ddata, *dscales;
} fp4_matrix;

static fp4_matrix make_fp4(int64_t rows, int64_t cols, int special, int nan_ok)
{
    static const uint8_t edge[] = {0, 1, 2, 100, 127, 128, 129, 140, 200, 254, 255};
    fp4_matrix m;
    memset(&m, 0, sizeof m);
    size_t sbytes = test_weight_layout(&m.h, SP_WF_MXFP4, rows, cols);
    size_t dbytes = m.h.row_bytes * (size_t)rows;
    m.hdata = malloc(dbytes);
    m.hscales = malloc(sbytes);
    for (size_t i = 0; i < dbytes; i++)
        m.hdata[i] = (uint8_t)rnd32();
    for (size_t i = 0; i < sbytes; i++) {
        m.hscales[i] = (uint8_t)(120 + rnd32() % 12);
        if ((int)(rnd32() % 1000) < special) {
            uint8_t s = edge[rnd32() % sizeof edge];
            if (s < 254 || nan_ok)
                m.hscales[i] = s;
        }
    }
    m.h.data = m.hdata;
    m.h.scales = m.hscales;
    m.ddata = dev_from(m.hdata, dbytes);
    m.dscales = dev_from(m.hscales, sbytes);
    m.d = m.h;
    m.d.data = m.ddata;
    m.d.scales = m.dscales;
    return m;
}

static void free_fp4(fp4_matrix *m)
{
    free(m->hdata);
    free(m->hscales);
    spc_free(m->ddata);
    spc_free(m->dscales);
}

/* A table of E gpt-oss experts (gate_up 2I x H, down H x I, biases) on the device; packed:
 * the table points into one allocation a tensor holding every expert at equal steps (the
 * hub's layout), whose steps are in `steps`, else each matrix is its own allocation. */
typedef struct experts {
    int64_t E, H, I;
    fp4_matrix *gu, *dn;
    float **bgu, **bdn;         /* host biases */
    float **dbgu, **ddn;        /* device biases */
    spc_expert *dtable;
    void *packed[6];            /* gate_up data, scales, down data, scales, the two biases */
    spc_expert_steps steps;     /* packed: uniform */
} experts;

/* The E experts' matrices or biases (host copies, `bytes` each) in one device allocation. */
static void *pack_device(int64_t E, size_t bytes, const void *(*part)(const experts *, int64_t),
                         const experts *x)
{
    unsigned char *h = malloc((size_t)E * bytes);
    for (int64_t e = 0; e < E; e++)
        memcpy(h + (size_t)e * bytes, part(x, e), bytes);
    void *d = dev_from(h, (size_t)E * bytes);
    free(h);
    return d;
}

static const void *gu_data(const experts *x, int64_t e) { return x->gu[e].hdata; }
static const void *gu_scales(const experts *x, int64_t e) { return x->gu[e].hscales; }
static const void *dn_data(const experts *x, int64_t e) { return x->dn[e].hdata; }
static const void *dn_scales(const experts *x, int64_t e) { return x->dn[e].hscales; }
static const void *gu_bias(const experts *x, int64_t e) { return x->bgu[e]; }
static const void *dn_bias(const experts *x, int64_t e) { return x->bdn[e]; }

/* The table's entries pointed into the packed tensors. */
static void point_packed(experts *x, spc_expert *table)
{
    const fp4_matrix *g = &x->gu[0], *d = &x->dn[0];
    const size_t gd = g->h.row_bytes * (size_t)g->h.rows, gs = g->h.scale_row_bytes * (size_t)g->h.rows;
    const size_t dd = d->h.row_bytes * (size_t)d->h.rows, ds = d->h.scale_row_bytes * (size_t)d->h.rows;
    const size_t sizes[6] = {gd, gs, dd, ds, (size_t)(2 * x->I) * 4, (size_t)x->H * 4};
    const void *(*parts[6])(const experts *, int64_t) = {gu_data, gu_scales, dn_data,
                                                          dn_scales, gu_bias, dn_bias};
    for (int i = 0; i < 6; i++)
        x->packed[i] = pack_device(x->E, sizes[i], parts[i], x);
    for (int64_t e = 0; e < x->E; e++) {
        unsigned char *p[6];
        for (int i = 0; i < 6; i++)
            p[i] = (unsigned char *)x->packed[i] + (size_t)e * sizes[i];
        table[e].gate.data = table[e].up.data = p[0];
        table[e].gate.scales = table[e].up.scales = p[1];
        table[e].down.data = p[2];
        table[e].down.scales = p[3];
        table[e].gate_up_bias = (const float *)p[4];
        table[e].down_bias = (const float *)p[5];
    }
    const sp_expert_steps st = sp_expert_steps_of((const sp_expert *)table, x->E);
    memcpy(&x->steps, &st, sizeof st); /* spc_expert_steps mirrors it (backend_cuda.c) */
}

static experts make_experts_laid(int64_t E, int64_t H, int64_t I, int special, int nan_ok,
                                 bool packed)
{
    experts x = {.E = E, .H = H, .I = I};
    x.gu = calloc((size_t)E, sizeof *x.gu);
    x.dn = calloc((size_t)E, sizeof *x.dn);
    x.bgu = calloc((size_t)E, sizeof(float *));
    x.bdn = calloc((size_t)E, sizeof(float *));
    x.dbgu = calloc((size_t)E, sizeof(float *));
    x.ddn = calloc((size_t)E, sizeof(float *));
    spc_expert *table = calloc((size_t)E, sizeof *table);
    for (int64_t e = 0; e < E; e++) {
        x.gu[e] = make_fp4(2 * I, H, special, nan_ok);
        x.dn[e] = make_fp4(H, I, special, nan_ok);
        x.bgu[e] = malloc((size_t)(2 * I) * 4);
        x.bdn[e] = malloc((size_t)H * 4);
        fill(x.bgu[e], 2 * I, 0.5f);
        fill(x.bdn[e], H, 0.5f);
        x.dbgu[e] = dev_from(x.bgu[e], (size_t)(2 * I) * 4);
        x.ddn[e] = dev_from(x.bdn[e], (size_t)H * 4);
        table[e].gate = x.gu[e].d;
        table[e].up = x.gu[e].d; /* stage 1 (SwiGLU's up, no bias) reads the same matrix */
        table[e].down = x.dn[e].d;
        table[e].gate_up_bias = x.dbgu[e];
        table[e].down_bias = x.ddn[e];
    }
    if (packed)
        point_packed(&x, table);
    x.dtable = dev_from(table, (size_t)E * sizeof *table);
    free(table);
    return x;
}

static experts make_experts(int64_t E, int64_t H, int64_t I, int special, int nan_ok)
{
    return make_experts_laid(E, H, I, special, nan_ok, false);
}

static void free_experts(experts *x)
{
    for (int i = 0; i < 6; i++)
        spc_free(x->packed[i]);
    for (int64_t e = 0; e < x->E; e++) {
        free_fp4(&x->gu[e]);
        free_fp4(&x->dn[e]);
        free(x->bgu[e]);
        free(x->bdn[e]);
        spc_free(x->dbgu[e]);
        spc_free(x->ddn[e]);
    }
    free(x->gu);
    free(x->dn);
    free(x->bgu);
    free(x->bdn);
    free(x->dbgu);
    free(x->ddn);
    spc_free(x->dtable);
}

static spc_moe_args moe_args(const experts *x, int64_t n_tok, int64_t k, const int32_t *dids, bool fast)
{
    spc_moe_args a = {.experts = x->dtable, .n_experts = x->E, .act = SPC_ACT_GPTOSS_GLU, .H = x->H,
                      .I = x->I, .alpha = 1.702f, .limit = 7.0f, .n_tok = n_tok, .k = k, .ids = dids,
                      .row_fmt = SP_WF_MXFP4, .row_major_only = true, .fast = fast};
    return a;
}

/* Random distinct experts per token (ids [n_tok, k]) and weights. */
static void route(int64_t n_tok, int64_t k, int64_t E, int32_t *ids, float *w)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t j = 0; j < k; j++) {
            int32_t e;
            int dup;
            do {
                e = (int32_t)(rnd32() % E);
                dup = 0;
                for (int64_t q = 0; q < j; q++)
                    dup |= ids[t * k + q] == e;
            } while (dup);
            ids[t * k + j] = e;
            if (w)
                w[t * k + j] = 0.1f + (float)(rnd32() % 100) * 0.01f;
        }
}

/* Stage `stage` of every pair (0: gate_up + bias, 1: the same matrix as SwiGLU's up, no
 * bias, 2: down + bias) against sum bf16(x) w in double: finite outputs within 2e-6
 * of the sum of |terms|; a row holding a NaN scale gives NaN; a row that overflows
 * (a term past FLT_MAX) gives a non-finite output. Returns the worst ratio. */
static double check_stage(const experts *x, int stage, int64_t P, const int32_t *ids, const float *xin,
                          const float *y)
{
    const int64_t cols = stage == 2 ? x->I : x->H, n_out = stage == 2 ? x->H : 2 * x->I;
    double worst = 0;
    for (int64_t p = 0; p < P; p++) {
        const fp4_matrix *m = stage == 2 ? &x->dn[ids[p]] : &x->gu[ids[p]];
        const float *bias = stage == 2 ? x->bdn[ids[p]] : stage == 0 ? x->bgu[ids[p]] : NULL;
        for (int64_t r = 0; r < n_out; r++) {
            double s = bias ? bias[r] : 0.0, mag = bias ? fabs(bias[r]) : 0.0;
            int nan = 0, huge = 0;
            for (int64_t c = 0; c < cols; c++) {
                float w = sp_weight_at(&m->h, r, c);
                nan |= w != w;
                huge |= isinf(w) || fabs((double)w * bf16_round(xin[p * cols + c])) > 3.4e38;
                double term = (double)bf16_round(xin[p * cols + c]) * w;
                s += term;
                mag += fabs(term);
            }
            const float g = y[p * n_out + r];
            if (nan) {
                if (g == g)
                    fail_msg("stage %d pair %lld row %lld: %g where a NaN scale gives NaN", stage,
                             (long long)p, (long long)r, g);
                continue;
            }
            if (huge) {
                if (isfinite(g))
                    fail_msg("stage %d pair %lld row %lld: %g, expected non-finite", stage,
                             (long long)p, (long long)r, g);
                continue;
            }
            if (mag > 1e38 && !isfinite(g))
                continue; /* an fp32 running sum may overflow where the double one does not */
            double e = fabs(g - s) / (mag > 0 ? mag : 1);
            if (!(e <= 2e-6))
                fail_msg("stage %d pair %lld row %lld: %.9g, reference %.9g (of %.3g)", stage,
                         (long long)p, (long long)r, g, s, mag);
            worst = e > worst ? e : worst;
        }
    }
    return worst;
}

static void run_stages(int64_t H, int64_t I, int special)
{
    const int64_t E = 5, n_tok = 7, k = 3, P = n_tok * k;
    experts x = make_experts(E, H, I, special, 1);
    int32_t *ids = malloc((size_t)P * 4);
    route(n_tok, k, E, ids, NULL);
    int32_t *dids = dev_from(ids, (size_t)P * 4);
    float *x0 = malloc((size_t)(n_tok * H) * 4), *x2 = malloc((size_t)(P * I) * 4);
    fill(x0, n_tok * H, 1.0f);
    fill(x2, P * I, 4.0f);
    /* stage 0 reads token p / k; the reference wants one row per pair */
    float *x0p = malloc((size_t)(P * H) * 4);
    for (int64_t p = 0; p < P; p++)
        memcpy(x0p + p * H, x0 + (p / k) * H, (size_t)H * 4);
    float *dx0 = dev_from(x0, (size_t)(n_tok * H) * 4), *dx2 = dev_from(x2, (size_t)(P * I) * 4);
    float *dy0 = dev_poison(P * 2 * I), *dy2 = dev_poison(P * H);
    spc_moe_args a = moe_args(&x, n_tok, k, dids, true);
    CK(spc_moe_stage(g_stream, &a, 0, dx0, k, H, 2 * I, dy0));
    CK(spc_moe_stage(g_stream, &a, 2, dx2, 1, I, H, dy2));
    float *y0 = host_of(dy0, P * 2 * I), *y2 = host_of(dy2, P * H);
    double w0 = check_stage(&x, 0, P, ids, x0p, y0), w2 = check_stage(&x, 2, P, ids, x2, y2);
    spc_moe_args sw = a; /* SwiGLU's up: stage 1, no bias */
    sw.act = SPC_ACT_SWIGLU;
    CK(spc_moe_stage(g_stream, &sw, 1, dx0, k, H, 2 * I, dy0));
    float *y1 = host_of(dy0, P * 2 * I);
    double w1 = check_stage(&x, 1, P, ids, x0p, y1);
    printf("moe stage fast H %lld I %lld, %d/1000 edge scales: max error %.3g / %.3g / %.3g of the "
           "sum of |terms|\n",
           (long long)H, (long long)I, special, w0, w1, w2);
    free(y0);
    free(y1);
    free(y2);
    free(ids);
    free(x0);
    free(x2);
    free(x0p);
    spc_free(dids);
    spc_free(dx0);
    spc_free(dx2);
    spc_free(dy0);
    spc_free(dy2);
    free_experts(&x);
}

static void test_stage_reference(void **state)
{
    (void)state;
    NEED_GPU();
    run_stages(352, 224, 0);   /* partial last slices (2.75 and 1.75 slices) */
    run_stages(128, 96, 60);   /* edge scales: subnormal to 2^127, overflow, NaN */
    run_stages(1056, 4128, 5); /* more than one round of slices on the down stage */
}

/* One whole pass (n_tok tokens, top k of E) into a fresh host buffer. */
static float *run_pass(const spc_moe_args *a0, const float *dx, const float *dw, bool grouped,
                       float *dc, int32_t *dgi)
{
    spc_moe_args a = *a0;
    const int64_t P = a.n_tok * a.k, wide = 2 * a.I > a.H ? 2 * a.I : a.H;
    float *da = dev_poison(P * wide), *db = dev_poison(P * wide), *dout = dev_poison(a.n_tok * a.H);
    a.x = dx;
    a.w = dw;
    a.out = dout;
    a.scratch_a = da;
    a.scratch_b = db;
    a.scratch_c = grouped ? dc : NULL;
    a.group_ints = grouped ? dgi : NULL;
    CK(spc_moe_ffn(g_stream, &a));
    float *out = host_of(dout, a.n_tok * a.H);
    spc_free(da);
    spc_free(db);
    spc_free(dout);
    return out;
}

/* The pass over N tokens: grouped (37 tokens: one partial group an expert; 101: a full
 * group of SPC_MOE_TC_GEMM_TOK pairs and a partial one) equals pairs alone, each token
 * alone equals the batch, an invalid id gives its token NaN either way. */
static void pass_invariance(int64_t N)
{
    const int64_t E = 8, H = 2880 / 9, I = 2880 / 9 + 32, k = 4, P = N * k;
    experts x = make_experts(E, H, I, 0, 0);
    int32_t *ids = malloc((size_t)P * 4);
    float *w = malloc((size_t)P * 4), *xin = malloc((size_t)(N * H) * 4);
    route(N, k, E, ids, w);
    fill(xin, N * H, 1.0f);
    int32_t *dids = dev_from(ids, (size_t)P * 4);
    float *dw = dev_from(w, (size_t)P * 4), *dx = dev_from(xin, (size_t)(N * H) * 4);
    float *dc = dev_poison(P * H);
    int32_t *dgi;
    CK(spc_malloc((void **)&dgi, (size_t)spc_moe_group_ints(P) * 4));
    spc_moe_args fast = moe_args(&x, N, k, dids, true), exact = moe_args(&x, N, k, dids, false);
    float *alone = run_pass(&fast, dx, dw, false, dc, dgi);
    float *grouped = run_pass(&fast, dx, dw, true, dc, dgi); /* 4 N pairs over 8 experts */
    float *ref = run_pass(&exact, dx, dw, false, dc, dgi);
    int64_t bad_group = count_diff_bits(alone, grouped, N * H), bad_tok = 0;
    for (int64_t t = 0; t < N; t += 5) { /* each token alone (a decode step) */
        spc_moe_args one = fast;
        one.n_tok = 1;
        one.ids = dids + t * k;
        float *o = run_pass(&one, dx + t * H, dw + t * k, false, dc, dgi);
        bad_tok += count_diff_bits(o, alone + t * H, H);
        free(o);
    }
    /* against the exact pass: BF16 rounding of both stages' inputs */
    double worst = 0, maxabs = 0;
    for (int64_t i = 0; i < N * H; i++)
        maxabs = fabs(ref[i]) > maxabs ? fabs(ref[i]) : maxabs;
    for (int64_t i = 0; i < N * H; i++) {
        double e = fabs(alone[i] - ref[i]) / maxabs;
        worst = e == e ? (e > worst ? e : worst) : INFINITY;
    }
    /* an id out of range: NaN for its token, the same grouped or alone */
    ids[5] = (int32_t)E + 2;
    CK(spc_memcpy_h2d_sync(g_stream, dids, ids, (size_t)P * 4));
    float *na = run_pass(&fast, dx, dw, false, dc, dgi), *ng = run_pass(&fast, dx, dw, true, dc, dgi);
    const int64_t bad_nan = count_diff_bits(na, ng, N * H);
    const int nan_row = na[(5 / k) * H] != na[(5 / k) * H];
    free(na);
    free(ng);
    printf("moe pass fast, %lld tokens: grouped vs alone %lld differ, token alone vs batch %lld "
           "differ, max |fast - exact| %.3g of max |out|; an invalid id: %lld differ, NaN row %d\n",
           (long long)N, (long long)bad_group, (long long)bad_tok, worst, (long long)bad_nan, nan_row);
    if (bad_group || bad_tok || !(worst < 2e-2) || bad_nan || !nan_row)
        fail_msg("moe pass fast: %lld grouped, %lld alone differ; error %.3g; invalid id: %lld, %d",
                 (long long)bad_group, (long long)bad_tok, worst, (long long)bad_nan, nan_row);
    free(alone);
    free(grouped);
    free(ref);
    free(ids);
    free(w);
    free(xin);
    spc_free(dids);
    spc_free(dw);
    spc_free(dx);
    spc_free(dc);
    spc_free(dgi);
    free_experts(&x);
}

static void test_pass_invariance(void **state)
{
    (void)state;
    NEED_GPU();
    pass_invariance(37);
    pass_invariance(101);
}

/* Logits [N, E] with ties everywhere (quarter steps), a token of zeros and minus zeros,
 * one with infinities, one with a NaN first, one with a NaN later, one all NaN (and, for
 * more than 100 experts, one with a NaN at index 100). */
static void route_logits(int64_t N, int64_t E, float *l)
{
    for (int64_t i = 0; i < N * E; i++)
        l[i] = (float)((int)(rnd32() % 16) - 8) * 0.25f;
    for (int64_t i = 0; i < E; i++) {
        l[1 * E + i] = i % 3 ? 0.0f : -0.0f;
        l[5 * E + i] = NAN;
    }
    l[2 * E + 5] = l[2 * E + 9] = INFINITY;
    l[2 * E + 0] = -INFINITY;
    l[3 * E + 0] = NAN;
    l[4 * E + 7] = NAN;
    if (E > 100)
        l[6 * E + 100] = NAN; /* a NaN past the first 32 (a lane's fourth logit) */
}

/* gpt-oss's routing folded into the first expert kernel (spc_moe_route_ffn) against
 * spc_moe_route then spc_moe_ffn: ids, weights and outputs bit for bit, in both
 * precisions, for a decode step and verify batches; E experts (gpt-oss-20b's 32: one
 * logit a lane; 120b's 128: four). */
static void route_folded(int64_t E, bool packed)
{
    const int64_t H = 320, I = 352, k = 4, N = 9, P = N * k;
    experts x = make_experts_laid(E, H, I, 0, 0, packed);
    if (packed && !x.steps.uniform)
        fail_msg("packed experts: sp_expert_steps_of found them not uniform");
    float *l = malloc((size_t)(N * E) * 4), *xin = malloc((size_t)(N * H) * 4);
    route_logits(N, E, l);
    fill(xin, N * H, 1.0f);
    float *dl = dev_from(l, (size_t)(N * E) * 4), *dx = dev_from(xin, (size_t)(N * H) * 4);
    const int64_t wide = 2 * I > H ? 2 * I : H;
    float *da = dev_poison(P * wide), *db = dev_poison(P * wide);
    float *out[2], *dw[2];
    int32_t *dids[2];
    for (int i = 0; i < 2; i++) {
        out[i] = dev_poison(N * H);
        dw[i] = dev_poison(P);
        dids[i] = (int32_t *)dev_poison(P);
    }
    const sp_route_cfg rc = {.kind = SP_MOE_TOPK_SOFTMAX, .n_experts = E, .top_k = k};
    const int64_t shapes[][2] = {{0, 1}, {3, 1}, {5, 1}, {0, 3}, {2, 5}, {0, N}}; /* first, count */
    int64_t bad = 0, nan_w = 0;
    for (int fast = 0; fast < 2; fast++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int64_t t0 = shapes[s][0], n = shapes[s][1];
            spc_moe_args a = moe_args(&x, n, k, NULL, fast);
            a.x = dx + t0 * H;
            a.scratch_a = da;
            a.scratch_b = db;
            CK(spc_moe_route(g_stream, &rc, dl + t0 * E, n, dids[0], dw[0]));
            a.ids = dids[0];
            a.w = dw[0];
            a.out = out[0];
            CK(spc_moe_ffn(g_stream, &a));
            a.out = out[1];
            a.steps = x.steps; /* packed: each expert's matrices from its id */
            CK(spc_moe_route_ffn(g_stream, &rc, dl + t0 * E, dids[1], dw[1], &a));
            float *o[2], *w[2], *id[2];
            for (int i = 0; i < 2; i++) {
                o[i] = host_of(out[i], n * H);
                w[i] = host_of(dw[i], n * k);
                id[i] = host_of((const float *)dids[i], n * k);
            }
            bad += count_diff_bits(o[0], o[1], n * H) + count_diff_bits(w[0], w[1], n * k) +
                   count_diff_bits(id[0], id[1], n * k);
            for (int64_t j = 0; j < n * k; j++)
                nan_w += w[1][j] != w[1][j];
            for (int i = 0; i < 2; i++) {
                free(o[i]);
                free(w[i]);
                free(id[i]);
            }
        }
    printf("moe routing folded into the expert pass, %lld experts%s: %lld values differ, %lld "
           "NaN weights seen\n",
           (long long)E, packed ? " at equal steps (read from their ids)" : "", (long long)bad,
           (long long)nan_w);
    if (bad || !nan_w)
        fail_msg("moe routing folded: %lld values differ (NaN weights seen: %lld)", (long long)bad,
                 (long long)nan_w);
    for (int i = 0; i < 2; i++) {
        spc_free(out[i]);
        spc_free(dw[i]);
        spc_free(dids[i]);
    }
    spc_free(da);
    spc_free(db);
    spc_free(dl);
    spc_free(dx);
    free(l);
    free(xin);
    free_experts(&x);
}

static void test_route_folded(void **state)
{
    (void)state;
    NEED_GPU();
    route_folded(32, false);
    route_folded(128, false);
    route_folded(32, true);
    route_folded(128, true);
}

/* The residual step inside the expert op (spc_moe_args.then_x: the expert sum, x += out,
 * xn = rmsnorm(x) in the sum's launch) against spc_moe_ffn then spc_add_rmsnorm: out, x
 * and xn bit for bit. One case: H, I, N tokens, top k of E, precision, grouping scratch or
 * not, routing folded or not; token 1 (when there) names one expert twice (the sum takes
 * it once, as k_moe_combine). */
static int64_t then_norm(int64_t H, int64_t I, int64_t N, int64_t k, int64_t E, bool fast,
                         bool grouped, bool routed)
{
    const int64_t P = N * k, wide = 2 * I > H ? 2 * I : H;
    experts x = make_experts(E, H, I, 0, 0);
    int32_t *ids = malloc((size_t)P * 4);
    float *w = malloc((size_t)P * 4), *xin = malloc((size_t)(N * H) * 4);
    float *res = malloc((size_t)(N * H) * 4), *nw = malloc((size_t)H * 4);
    const int64_t NL = N > 7 ? N : 7; /* route_logits writes 7 rows */
    float *l = malloc((size_t)(NL * E) * 4);
    route(N, k, E, ids, w);
    if (N > 1 && k > 1)
        ids[k + 1] = ids[k];
    fill(xin, N * H, 1.0f);
    fill(res, N * H, 3.0f);
    fill(nw, H, 1.0f);
    route_logits(NL, E, l);
    for (int64_t i = 0; i < N * E; i++) /* finite logits: every token routed */
        l[i] = l[i] == l[i] && !isinf(l[i]) ? l[i] : 0.5f;
    int32_t *dids = dev_from(ids, (size_t)P * 4), *dgi;
    float *dw = dev_from(w, (size_t)P * 4), *dx = dev_from(xin, (size_t)(N * H) * 4);
    float *dnw = dev_from(nw, (size_t)H * 4), *dl = dev_from(l, (size_t)(N * E) * 4);
    float *da = dev_poison(P * wide), *db = dev_poison(P * wide), *dc = dev_poison(P * H);
    CK(spc_malloc((void **)&dgi, (size_t)spc_moe_group_ints(P) * 4));
    const sp_route_cfg rc = {.kind = SP_MOE_TOPK_SOFTMAX, .n_experts = E, .top_k = k};
    float *got[2][3]; /* [fused][out, x, xn] */
    for (int fused = 0; fused < 2; fused++) {
        float *dout = dev_poison(N * H), *dres = dev_from(res, (size_t)(N * H) * 4);
        float *dxn = dev_poison(N * H);
        int32_t *rids = (int32_t *)dev_poison(P);
        float *rw = dev_poison(P);
        spc_moe_args a = moe_args(&x, N, k, dids, fast);
        a.x = dx, a.w = dw, a.out = dout, a.scratch_a = da, a.scratch_b = db;
        a.scratch_c = grouped ? dc : NULL;
        a.group_ints = grouped ? dgi : NULL;
        if (fused)
            a.then_x = dres, a.then_w = dnw, a.then_eps = 1e-5f, a.then_xn = dxn;
        if (routed)
            CK(spc_moe_route_ffn(g_stream, &rc, dl, rids, rw, &a));
        else
            CK(spc_moe_ffn(g_stream, &a));
        if (!fused)
            CK(spc_add_rmsnorm(g_stream, dres, H, dout, H, dnw, N, H, 1e-5f, dxn, H));
        got[fused][0] = host_of(dout, N * H);
        got[fused][1] = host_of(dres, N * H);
        got[fused][2] = host_of(dxn, N * H);
        spc_free(dout);
        spc_free(dres);
        spc_free(dxn);
        spc_free(rids);
        spc_free(rw);
    }
    int64_t bad = 0;
    for (int i = 0; i < 3; i++) {
        bad += count_diff_bits(got[0][i], got[1][i], N * H);
        free(got[0][i]);
        free(got[1][i]);
    }
    free(ids);
    free(w);
    free(xin);
    free(res);
    free(nw);
    free(l);
    spc_free(dids);
    spc_free(dgi);
    spc_free(dw);
    spc_free(dx);
    spc_free(dnw);
    spc_free(dl);
    spc_free(da);
    spc_free(db);
    spc_free(dc);
    free_experts(&x);
    return bad;
}

static void test_then_norm(void **state)
{
    (void)state;
    NEED_GPU();
    static const struct {
        int64_t H, I, N, k, E;
        bool fast, grouped, routed;
    } c[] = {
        {320, 352, 1, 4, 32, true, false, true},   /* a gpt-oss decode step, routing folded */
        {320, 352, 5, 4, 32, true, false, true},   /* a verify batch */
        {320, 352, 1, 4, 32, false, false, false}, /* exact precision */
        {320, 352, 37, 4, 8, true, true, false},   /* grouped by expert (prefill) */
        {320, 352, 37, 4, 8, false, true, false},
        {4128, 96, 3, 8, 16, true, false, false},  /* past the norm's registers; k = 8 */
        {320, 96, 3, 9, 16, true, false, false},   /* k = 9: the two launches */
        {352, 96, 2, 1, 4, false, false, false},   /* k = 1 */
    };
    int64_t bad = 0;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const int64_t b = then_norm(c[i].H, c[i].I, c[i].N, c[i].k, c[i].E, c[i].fast,
                                    c[i].grouped, c[i].routed);
        if (b)
            printf("then_norm case %zu: %lld values differ\n", i, (long long)b);
        bad += b;
    }
    printf("moe sum + residual + norm in one launch against the three ops: %lld values differ\n",
           (long long)bad);
    if (bad)
        fail_msg("moe then_norm: %lld values differ", (long long)bad);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stage_reference),
        cmocka_unit_test(test_pass_invariance),
        cmocka_unit_test(test_route_folded),
        cmocka_unit_test(test_then_norm),
    };
    return cmocka_run_group_tests(tests, cuda_group_setup, cuda_group_teardown);
}
