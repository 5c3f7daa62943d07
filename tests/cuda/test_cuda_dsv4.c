/* test_cuda_dsv4.c: DeepSeek-V4's CUDA ops (src/kernels/cuda/cuda_dsv4.cu) against the
 * CPU scalar references (kernels/cpu/dsv4.h) on random data, and each op's batch
 * invariance (a row alone == in the batch, bit for bit). Tolerances: bit-identical where
 * the GPU runs the CPU's operations in the CPU's order with no transcendental function
 * (hc_collapse, hc_expand, rope_tail); relative 1e-5 (of the row's largest magnitude) where
 * expf or a reduction tree enters; the indexer's choice must be the CPU's exactly, ties
 * (many scores at 0) included, for the heap and the introselect paths of torch.topk and
 * with a replay queue. Without a GPU every test prints "no CUDA device: skipped" (exit 77).
 * The routes and the clamped SwiGLU experts are in test_cuda_kernels.c with the others. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/cpu/dsv4.h"
#include "kernels/cuda/cuda_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_TEST_SEED 0x2545f4914f6cdd1dull
#include "cuda_test_harness.h"

/* ---- data and device buffers ----------------------------------------------------------- */

static float *rand_host(int64_t n, float scale)
{
    float *p = malloc((size_t)(n ? n : 1) * 4);
    for (int64_t i = 0; i < n; i++)
        p[i] = frand() * scale;
    return p;
}

/* Largest |got - want| over max |want| (NaN: infinite). */
static double rel_err(const float *got, const float *want, int64_t n)
{
    double mag = 0, e = 0;
    for (int64_t i = 0; i < n; i++)
        mag = fmax(mag, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        e = got[i] != got[i] ? INFINITY : fmax(e, d);
    }
    return e / (mag + 1e-30);
}

static int64_t diff_bits(const void *a, const void *b, int64_t n)
{
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += memcmp((const char *)a + 4 * i, (const char *)b + 4 * i, 4) != 0;
    return d;
}

/* ---- hyper-connections ------------------------------------------------------------------ */

static void check_hc_weights(int64_t n, int64_t N, int64_t iters, int head)
{
    int64_t ms = head ? N : (2 + N) * N;
    float *mix = rand_host(n * ms, 3.0f), *base = rand_host(ms, 1.0f), *scale = rand_host(3, 1.0f);
    float *dmix = dev_from(mix, (size_t)(n * ms) * 4), *dbase = dev_from(base, (size_t)ms * 4);
    float *dscale = dev_from(scale, 12), *dpre = dev_poison(n * N), *dpost = dev_poison(n * N);
    float *dcomb = dev_poison(n * N * N);
    CK(spc_hc_weights(g_stream, dmix, ms, dbase, dscale, n, N, iters, 1e-6f, dpre, head ? NULL : dpost,
                      head ? NULL : dcomb));
    float *pre = host_copy(dpre, (size_t)(n * N) * 4), *post = host_copy(dpost, (size_t)(n * N) * 4);
    float *comb = host_copy(dcomb, (size_t)(n * N * N) * 4);
    float *rp = malloc((size_t)N * 4), *rq = malloc((size_t)N * 4), *rc = malloc((size_t)(N * N) * 4);
    double worst = 0;
    for (int64_t t = 0; t < n; t++) {
        sp_hc_weights(mix + t * ms, base, scale, N, iters, 1e-6f, rp, head ? NULL : rq, head ? NULL : rc);
        worst = fmax(worst, rel_err(pre + t * N, rp, N));
        if (!head) {
            worst = fmax(worst, rel_err(post + t * N, rq, N));
            worst = fmax(worst, rel_err(comb + t * N * N, rc, N * N));
        }
    }
    /* the last row alone */
    CK(spc_hc_weights(g_stream, dmix + (n - 1) * ms, ms, dbase, dscale, 1, N, iters, 1e-6f, dpre,
                      head ? NULL : dpost, head ? NULL : dcomb));
    float *one = host_copy(dpre, (size_t)N * 4);
    int64_t bad = diff_bits(one, pre + (n - 1) * N, N);
    printf("hc_weights N %lld iters %lld%s: max rel error %.3g, alone vs batch %lld differ\n", (long long)N,
           (long long)iters, head ? " (head)" : "", worst, (long long)bad);
    assert_true(worst < 1e-5 && bad == 0);
    free(mix), free(base), free(scale), free(pre), free(post), free(comb), free(rp), free(rq), free(rc);
    free(one);
    spc_free(dmix), spc_free(dbase), spc_free(dscale), spc_free(dpre), spc_free(dpost), spc_free(dcomb);
}

static void test_hc_weights(void **state)
{
    (void)state;
    NEED_GPU();
    check_hc_weights(37, 4, 20, 0);
    check_hc_weights(5, 3, 3, 0);
    check_hc_weights(37, 4, 0, 1);
}

/* collapse and expand: the CPU's operations in the CPU's order: equal bits. */
static void test_hc_mix(void **state)
{
    (void)state;
    NEED_GPU();
    const int64_t n = 19, N = 4, H = 96;
    float *st = rand_host(n * N * H, 2.0f), *pre = rand_host(n * N, 1.0f), *y = rand_host(n * H, 2.0f);
    float *post = rand_host(n * N, 2.0f), *comb = rand_host(n * N * N, 1.0f);
    float *dst = dev_from(st, (size_t)(n * N * H) * 4), *dpre = dev_from(pre, (size_t)(n * N) * 4);
    float *dy = dev_from(y, (size_t)(n * H) * 4), *dpost = dev_from(post, (size_t)(n * N) * 4);
    float *dcomb = dev_from(comb, (size_t)(n * N * N) * 4);
    float *dcol = dev_poison(n * H), *dexp = dev_poison(n * N * H);
    CK(spc_hc_collapse(g_stream, dst, dpre, n, N, H, dcol));
    CK(spc_hc_expand(g_stream, dst, dy, dpost, dcomb, n, N, H, dexp));
    float *col = host_copy(dcol, (size_t)(n * H) * 4), *ex = host_copy(dexp, (size_t)(n * N * H) * 4);
    float *rcol = malloc((size_t)(n * H) * 4), *rex = malloc((size_t)(n * N * H) * 4);
    for (int64_t t = 0; t < n; t++) {
        sp_hc_collapse(st + t * N * H, pre + t * N, N, H, rcol + t * H);
        sp_hc_expand(st + t * N * H, y + t * H, post + t * N, comb + t * N * N, N, H, rex + t * N * H);
    }
    int64_t b1 = diff_bits(col, rcol, n * H), b2 = diff_bits(ex, rex, n * N * H);
    printf("hc_collapse: %lld of %lld differ from the CPU; hc_expand: %lld of %lld\n", (long long)b1,
           (long long)(n * H), (long long)b2, (long long)(n * N * H));
    assert_true(b1 == 0 && b2 == 0);
    free(st), free(pre), free(y), free(post), free(comb), free(col), free(ex), free(rcol), free(rex);
    spc_free(dst), spc_free(dpre), spc_free(dy), spc_free(dpost), spc_free(dcomb), spc_free(dcol);
    spc_free(dexp);
}

static void test_rope_tail(void **state)
{
    (void)state;
    NEED_GPU();
    const int64_t n = 11, nh = 5, hd = 48, rot = 16, hs = hd + 3, ts = nh * hs + 5;
    for (int inv = 0; inv < 2; inv++) {
        float *x = rand_host(n * ts, 2.0f), *cs = rand_host(n * rot, 1.0f);
        float *dx = dev_from(x, (size_t)(n * ts) * 4), *dcs = dev_from(cs, (size_t)(n * rot) * 4);
        CK(spc_rope_tail(g_stream, dx + hd - rot, n, nh, ts, hs, rot, dcs, inv));
        float *got = host_copy(dx, (size_t)(n * ts) * 4);
        for (int64_t t = 0; t < n; t++)
            for (int64_t h = 0; h < nh; h++)
                sp_rope_tail(x + t * ts + h * hs + hd - rot, rot, cs + t * rot, inv);
        int64_t bad = diff_bits(got, x, n * ts);
        printf("rope_tail%s: %lld of %lld differ from the CPU\n", inv ? " (inverse)" : "", (long long)bad,
               (long long)(n * ts));
        assert_int_equal(bad, 0);
        free(x), free(cs), free(got);
        spc_free(dx), spc_free(dcs);
    }
}

/* ---- compressed entries ------------------------------------------------------------------ */

static void check_compress(int overlap, int64_t rate, int64_t hd, int64_t rot)
{
    const int64_t n_pos = 9 * rate + 3, S = 4 * hd + 5, w0 = 2, w1 = 9; /* entries 2..8 */
    int64_t width = overlap ? 2 * hd : hd;
    float *side = rand_host(n_pos * S, 2.0f), *ape = rand_host(rate * width, 1.0f);
    float *norm = rand_host(hd, 1.0f), *cs = rand_host((w1 - w0) * rot, 1.0f);
    float *dside = dev_from(side, (size_t)(n_pos * S) * 4), *dape = dev_from(ape, (size_t)(rate * width) * 4);
    float *dnorm = dev_from(norm, (size_t)hd * 4), *dcs = dev_from(cs, (size_t)((w1 - w0) * rot) * 4);
    float *dout = dev_poison((w1 - w0) * (hd + 1));
    sp_compress_args a = {.kv = side, .gate = side + width, .stride = S, .ape = ape, .rate = rate, .hd = hd,
                          .overlap = overlap, .norm = norm, .eps = 1e-6f, .rot = rot};
    sp_compress_args d = a;
    d.kv = dside;
    d.gate = dside + width;
    d.ape = dape;
    d.norm = dnorm;
    CK(spc_compress(g_stream, &d, w0, w1, dcs, dout, hd + 1));
    float *got = host_copy(dout, (size_t)((w1 - w0) * (hd + 1)) * 4), *ref = malloc((size_t)hd * 4);
    double worst = 0;
    for (int64_t w = w0; w < w1; w++) {
        sp_compress_entry(&a, w, cs + (w - w0) * rot, ref);
        worst = fmax(worst, rel_err(got + (w - w0) * (hd + 1), ref, hd));
    }
    /* entry 5 alone == in the batch */
    CK(spc_compress(g_stream, &d, 5, 6, dcs + (5 - w0) * rot, dout, hd + 1));
    float *one = host_copy(dout, (size_t)hd * 4);
    int64_t bad = diff_bits(one, got + (5 - w0) * (hd + 1), hd);
    printf("compress %s rate %lld hd %lld: max rel error %.3g, alone vs batch %lld differ\n",
           overlap ? "CSA" : "HCA", (long long)rate, (long long)hd, worst, (long long)bad);
    assert_true(worst < 1e-5 && bad == 0);
    free(side), free(ape), free(norm), free(cs), free(got), free(ref), free(one);
    spc_free(dside), spc_free(dape), spc_free(dnorm), spc_free(dcs), spc_free(dout);
}

static void test_compress(void **state)
{
    (void)state;
    NEED_GPU();
    check_compress(1, 4, 32, 8);
    check_compress(0, 16, 32, 8);
    check_compress(1, 4, 300, 64); /* more channels than threads */
    check_compress(0, 8, 16, 16);
}

/* ---- lightning indexer ------------------------------------------------------------------- */

/* Queries at pos0.. over n_keys entries; ties: half of the keys are copies of others and
 * a third of the queries' heads see only negative dots (relu 0). */
static void check_index(int64_t n_tok, int64_t pos0, int64_t rate, int64_t topk, int64_t n_queue,
                        int ties)
{
    const int64_t ih = 3, ihd = 16, ks = ihd + 7;
    const int64_t n_keys = (pos0 + n_tok) / rate + 1;
    float *q = rand_host(n_tok * ih * ihd, 1.0f), *w = rand_host(n_tok * ih, 1.0f);
    float *keys = rand_host(n_keys * ks, 1.0f);
    if (ties) {
        for (int64_t s = 1; s < n_keys; s += 2) /* duplicated rows: equal scores */
            memcpy(keys + s * ks, keys + (rnd32() % (uint32_t)s) * ks, (size_t)ihd * 4);
        for (int64_t i = 0; i < n_tok * ih * ihd; i++)
            q[i] = fabsf(q[i]) * 0.1f;
        for (int64_t s = 0; s < n_keys; s += 3) /* all-negative keys: every dot <= 0, score 0 */
            for (int64_t d = 0; d < ihd; d++)
                keys[s * ks + d] = -fabsf(keys[s * ks + d]);
    }
    float *dq = dev_from(q, (size_t)(n_tok * ih * ihd) * 4), *dw = dev_from(w, (size_t)(n_tok * ih) * 4);
    float *dk = dev_from(keys, (size_t)(n_keys * ks) * 4);
    int32_t *dsel = (int32_t *)dev_poison(n_tok * topk);
    sp_index_batch b = {.q = dq, .w = dw, .keys = dk, .key_stride = ks, .n_heads = ih, .hd = ihd,
                        .topk = topk, .rate = rate, .pos0 = pos0, .n_tok = n_tok, .n_queue = n_queue,
                        .sel = dsel};
    size_t qb = 0;
    CK(spc_index_queue_bytes(&b, &qb));
    void *queue = NULL;
    CK(spc_malloc(&queue, qb ? qb : 16));
    CK(spc_index_topk(g_stream, &b, queue, qb));
    int32_t *sel = host_copy(dsel, (size_t)(n_tok * topk) * 4), *ref = malloc((size_t)topk * 4);
    int64_t most = n_keys > n_queue ? n_keys : n_queue;
    sp_topk_elem *scratch = malloc((size_t)most * sizeof *scratch);
    int64_t bad = 0, zeros = 0;
    for (int64_t t = 0; t < n_tok; t++) {
        sp_index_args a = {.q = q + t * ih * ihd, .w = w + t * ih, .keys = keys, .key_stride = ks,
                           .n_heads = ih, .hd = ihd, .n_valid = (pos0 + t + 1) / rate, .topk = topk,
                           .n_queue = n_queue};
        sp_index_topk(&a, ref, scratch);
        for (int64_t s = 0; s < (n_queue > a.n_valid ? n_queue : a.n_valid); s++)
            zeros += scratch[s].v == 0.0f; /* the queue, permuted: the same scores */
        bad += memcmp(ref, sel + t * topk, (size_t)topk * 4) != 0;
    }
    /* query n_tok - 1 alone */
    sp_index_batch one = b;
    one.q = dq + (n_tok - 1) * ih * ihd;
    one.w = dw + (n_tok - 1) * ih;
    one.pos0 = pos0 + n_tok - 1;
    one.n_tok = 1;
    CK(spc_index_topk(g_stream, &one, queue, qb));
    int32_t *alone = host_copy(dsel, (size_t)topk * 4);
    int64_t var = memcmp(alone, sel + (n_tok - 1) * topk, (size_t)topk * 4) != 0;
    printf("index_topk pos %lld+%lld rate %lld top-%lld queue %lld%s: %lld of %lld choices differ from the "
           "CPU (%lld zero scores), alone vs batch %lld\n",
           (long long)pos0, (long long)n_tok, (long long)rate, (long long)topk, (long long)n_queue,
           ties ? " ties" : "", (long long)bad, (long long)n_tok, (long long)zeros, (long long)var);
    assert_true(bad == 0 && var == 0);
    free(q), free(w), free(keys), free(sel), free(ref), free(scratch), free(alone);
    spc_free(dq), spc_free(dw), spc_free(dk), spc_free(dsel), spc_free(queue);
}

static void test_index_topk(void **state)
{
    (void)state;
    NEED_GPU();
    for (int ties = 0; ties < 2; ties++) {
        check_index(37, 0, 4, 4, 0, ties);    /* introselect; early queries keep everything */
        check_index(21, 100, 4, 9, 0, ties);  /* decode-like positions */
        check_index(40, 600, 4, 2, 0, ties);  /* k x 64 <= n: heap selection */
        check_index(30, 40, 4, 6, 75, ties);  /* the replay queue (future entries at -inf) */
        check_index(9, 500, 16, 3, 0, ties);
    }
}

/* ---- attention ---------------------------------------------------------------------------- */

static void check_attention(const char *what, int64_t n_tok, int64_t pos0, int64_t window, int64_t rate,
                            int comp, int sel)
{
    const int64_t nh = 4, hd = 40, qs = nh * hd + 3, kvs = hd + 1, cs = hd + 5, n_sel = 5;
    const int64_t n_pos = pos0 + n_tok, n_ent = n_pos / rate + 1;
    float *q = rand_host(n_tok * qs, 1.0f), *kv = rand_host(n_pos * kvs, 1.0f);
    float *ce = rand_host(n_ent * cs, 1.0f), *sinks = rand_host(nh, 2.0f);
    int32_t *ids = malloc((size_t)(n_tok * n_sel) * 4);
    for (int64_t t = 0; t < n_tok; t++) { /* ascending valid entries, then -1 */
        int64_t nv = (pos0 + t + 1) / rate, n = 0;
        for (int64_t e = 0; e < nv && n < n_sel; e++)
            if (rnd32() % 3 == 0 || nv - e <= n_sel - n)
                ids[t * n_sel + n++] = (int32_t)e;
        while (n < n_sel)
            ids[t * n_sel + n++] = -1;
    }
    float *dq = dev_from(q, (size_t)(n_tok * qs) * 4), *dkv = dev_from(kv, (size_t)(n_pos * kvs) * 4);
    float *dce = dev_from(ce, (size_t)(n_ent * cs) * 4), *dsinks = dev_from(sinks, (size_t)nh * 4);
    int32_t *dids = dev_from(ids, (size_t)(n_tok * n_sel) * 4);
    float *dout = dev_poison(n_tok * nh * hd);
    sp_dsv4_attn_args a = {.q = q, .q_stride = qs, .n_heads = nh, .hd = hd, .kv = kv, .kv_stride = kvs,
                           .comp = comp ? ce : NULL, .comp_stride = cs, .rate = rate,
                           .sel = sel ? ids : NULL, .n_sel = n_sel, .pos0 = pos0, .n_tok = n_tok,
                           .window = window, .scale = 0.15f, .sinks = sinks};
    sp_dsv4_attn_args d = a;
    d.q = dq, d.kv = dkv, d.comp = comp ? dce : NULL, d.sel = sel ? dids : NULL, d.sinks = dsinks;
    d.out = dout;
    CK(spc_dsv4_attention(g_stream, &d));
    float *got = host_copy(dout, (size_t)(n_tok * nh * hd) * 4), *ref = malloc((size_t)(n_tok * nh * hd) * 4);
    int64_t keys = window + (comp ? (sel ? n_sel : n_ent) : 0) + 1;
    const float **rows = malloc((size_t)keys * sizeof *rows);
    a.scratch = malloc((size_t)keys * 4);
    a.out = ref;
    sp_dsv4_attention(&a, rows);
    double worst = 0;
    for (int64_t r = 0; r < n_tok * nh; r++)
        worst = fmax(worst, rel_err(got + r * hd, ref + r * hd, hd));
    int64_t bad = 0; /* tokens alone == in the batch */
    for (int64_t t = 0; t < n_tok; t += 5) {
        sp_dsv4_attn_args o = d;
        o.q = dq + t * qs, o.pos0 = pos0 + t, o.n_tok = 1, o.sel = sel ? dids + t * n_sel : NULL;
        CK(spc_dsv4_attention(g_stream, &o));
        float *one = host_copy(dout, (size_t)(nh * hd) * 4);
        bad += diff_bits(one, got + t * nh * hd, nh * hd);
        free(one);
    }
    printf("dsv4_attention %s: max rel error %.3g, alone vs batch %lld differ\n", what, worst, (long long)bad);
    assert_true(worst < 1e-5 && bad == 0);
    free(q), free(kv), free(ce), free(sinks), free(ids), free(got), free(ref), free(rows), free(a.scratch);
    spc_free(dq), spc_free(dkv), spc_free(dce), spc_free(dsinks), spc_free(dids), spc_free(dout);
}

static void test_dsv4_attention(void **state)
{
    (void)state;
    NEED_GPU();
    check_attention("sliding", 23, 0, 8, 1, 0, 0);
    check_attention("sliding, late", 17, 90, 16, 1, 0, 0);
    check_attention("HCA", 40, 7, 16, 4, 1, 0);
    check_attention("HCA, 700 entries", 6, 2800, 12, 4, 1, 0);
    check_attention("CSA", 37, 30, 8, 4, 1, 1);
}

static void test_swiglu_limit(void **state)
{
    (void)state;
    NEED_GPU();
    const int64_t n = 10007;
    float *g = rand_host(n, 20.0f), *u = rand_host(n, 20.0f), *ref = malloc((size_t)n * 4);
    float *dg = dev_from(g, (size_t)n * 4), *du = dev_from(u, (size_t)n * 4), *dout = dev_poison(n);
    CK(spc_swiglu_limit(g_stream, dg, du, n, 7.0f, dout));
    float *got = host_copy(dout, (size_t)n * 4);
    sp_swiglu_limit(g, u, n, 7.0f, ref);
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)got[i] - ref[i]) / (fabs(ref[i]) + 1e-30));
    printf("swiglu_limit: max rel error %.3g\n", worst);
    assert_true(worst < 1e-5);
    free(g), free(u), free(ref), free(got);
    spc_free(dg), spc_free(du), spc_free(dout);
}

static void test_bad_args(void **state)
{
    (void)state;
    NEED_GPU();
    sp_dsv4_attn_args a = {.n_tok = 1, .n_heads = 1, .hd = 8, .window = 100000, .rate = 1};
    assert_int_not_equal(spc_dsv4_attention(g_stream, &a), 0); /* too many keys */
    sp_index_batch b = {.rate = 0, .n_tok = 1};
    size_t bytes;
    assert_int_not_equal(spc_index_queue_bytes(&b, &bytes), 0);
    b.rate = 4, b.n_heads = 1, b.hd = 4, b.topk = 1, b.pos0 = 64;
    assert_int_not_equal(spc_index_topk(g_stream, &b, NULL, 0), 0); /* queue too small */
    CK(spc_stream_sync(g_stream));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hc_weights),  cmocka_unit_test(test_hc_mix),
        cmocka_unit_test(test_rope_tail),   cmocka_unit_test(test_compress),
        cmocka_unit_test(test_index_topk),  cmocka_unit_test(test_dsv4_attention),
        cmocka_unit_test(test_swiglu_limit), cmocka_unit_test(test_bad_args),
    };
    int rc = cmocka_run_group_tests(tests, cuda_group_setup, cuda_group_teardown);
    return rc == 0 && !g_have_gpu ? 77 : rc;
}
