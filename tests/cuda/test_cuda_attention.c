/* test_cuda_attention.c: the CUDA attention kernels (cuda_attention.cu) against the CPU
 * reference (sp_attention_ref) on random data, GQA / MLA / sliding windows / sinks, every
 * case through the block kernel, its split launch and the warp kernel (staged or not),
 * which must agree bit for bit; and the fused RoPE + KV store against the unfused ops.
 * Without a GPU every test prints "no CUDA device: skipped" and is skipped (exit 77).
 * SPECULA_TEST_FILTER picks tests by name, SPECULA_TEST_ATTN_CASES test_attention's cases
 * by a part of their names (e.g. "decode" under compute-sanitizer, where all of them take
 * minutes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/cuda_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_TEST_SEED 0x6174746e74657374ull
#include "cuda_test_harness.h"

/* ---- attention --------------------------------------------------------------------- */

typedef struct attn_case {
    const char *name;
    int64_t n_heads, n_kv, qk, v, n_ctx_used, pos0, n_tok, window;
    int sinks, mla;
} attn_case;

static void run_attn_case(const attn_case *c)
{
    int64_t total = c->pos0 + c->n_tok;
    int64_t ks = c->mla ? c->qk : c->n_kv * c->qk, vs = c->mla ? c->qk : c->n_kv * c->v;
    int64_t qs = c->n_heads * c->qk;
    float *q = malloc((size_t)(c->n_tok * qs) * 4), *k = malloc((size_t)(total * ks) * 4);
    float *v = c->mla ? k : malloc((size_t)(total * vs) * 4);
    float *sinks = malloc((size_t)c->n_heads * 4);
    fill(q, c->n_tok * qs, 1.0f);
    fill(k, total * ks, 1.0f);
    if (!c->mla)
        fill(v, total * vs, 1.0f);
    fill(sinks, c->n_heads, 2.0f);
    float *dq = dev_from(q, (size_t)(c->n_tok * qs) * 4), *dk = dev_from(k, (size_t)(total * ks) * 4);
    float *dv = c->mla ? dk : dev_from(v, (size_t)(total * vs) * 4);
    float *dsinks = dev_from(sinks, (size_t)c->n_heads * 4);
    int64_t on = c->n_tok * c->n_heads * c->v;
    float *dout = dev_poison(on), *ref = malloc((size_t)on * 4);
    sp_attn_args a = {0};
    a.q = q;
    a.q_stride = qs;
    a.k_cache = k;
    a.v_cache = v;
    a.k_stride = c->mla ? ks : 0;
    a.v_stride = c->mla ? vs : 0;
    a.n_heads = c->n_heads;
    a.n_kv_heads = c->n_kv;
    a.qk_dim = c->qk;
    a.v_dim = c->v;
    a.pos0 = c->pos0;
    a.n_tok = c->n_tok;
    a.window = c->window;
    a.scale = 1.0f / sqrtf((float)c->qk);
    a.sinks = c->sinks ? sinks : NULL;
    a.out = ref;
    a.n_ctx = total;
    sp_attention_ref(&a);
    sp_attn_args d = a;
    d.q = dq;
    d.k_cache = dk;
    d.v_cache = dv;
    d.sinks = c->sinks ? dsinks : NULL;
    d.out = dout;
    CK(spc_attention(g_stream, &d));
    float *out = host_of(dout, on);
    double worst = 0, vmax = 1.0; /* |v| < 1: outputs are convex combinations */
    for (int64_t i = 0; i < on; i++) {
        double e = fabs(out[i] - ref[i]) / vmax;
        if (out[i] != out[i])
            e = INFINITY;
        worst = e > worst ? e : worst;
    }
    /* the split's scratch (counts zero before the first launch, left zero by each) */
    const size_t sb = spc_attention_split_bytes(&d);
    void *scr = dev_alloc(sb);
    CK(spc_memset(g_stream, scr, 0, sb));
    /* every token alone == in the batch, in one block per (query, head) and with its key
     * chunks over several blocks (as many as fill the device, and 3) */
    int64_t bad = 0;
    float *done = dev_poison(c->n_heads * c->v);
    for (int64_t t = 0; t < c->n_tok; t++) {
        sp_attn_args one = d;
        one.q = dq + t * qs;
        one.pos0 = c->pos0 + t;
        one.n_tok = 1;
        one.out = done;
        for (int split = -1; split <= 3; split += 2) { /* -1: spc_attention, 1: auto, 3 */
            CK(spc_memset(g_stream, done, 0xff, (size_t)(c->n_heads * c->v) * 4));
            if (split < 0)
                CK(spc_attention(g_stream, &one));
            else
                CK(spc_attention_split(g_stream, &one, 0, split == 1 ? 0 : split, scr, sb));
            float *o1 = host_of(done, c->n_heads * c->v);
            bad += count_diff_bits(o1, out + t * c->n_heads * c->v, c->n_heads * c->v);
            free(o1);
        }
    }
    /* the block-per-(query, head) kernel staged (where the dims allow) and not, whole or
     * split over 2, 3, 8 blocks or as many as fill the device (and with too little scratch:
     * whole), and the warp-per-(query, head) kernel: the same bits; */
    const int splits[] = {1, 0, 2, 3, 8, -1};
    /* the block kernel also with the earlier rows (all of them here) loaded before its wait */
    const int whiches[] = {1, 2, 3, 1 | SPC_ATTN_PAST_READY};
    for (size_t wi = 0; wi < sizeof whiches / sizeof whiches[0]; wi++) {
        const int which = whiches[wi];
        for (size_t si = 0; si < sizeof splits / sizeof splits[0]; si++) {
            if (which == 2 && si > 0)
                break;
            CK(spc_memset(g_stream, dout, 0xff, (size_t)on * 4));
            if (splits[si] < 0)
                CK(spc_attention_split(g_stream, &d, which, 4, scr, sb - 1));
            else
                CK(spc_attention_split(g_stream, &d, which, splits[si], scr, sb));
            float *ok = host_of(dout, on);
            bad += count_diff_bits(ok, out, on);
            free(ok);
        }
    }
    /* the counts are back to zero (a count per (query, head), at most 4096 of them: the
     * scratch's first 16 KiB; past them come the partials) */
    const int64_t n_cnt = c->n_tok * c->n_heads < 4096 ? c->n_tok * c->n_heads : 4096;
    unsigned *cnt = (unsigned *)host_copy(scr, (size_t)n_cnt * sizeof(unsigned));
    int64_t left = 0;
    for (int64_t i = 0; i < n_cnt; i++)
        left += cnt[i] != 0;
    free(cnt);
    spc_free(scr);
    printf("attention %-26s max abs error %.3g (|v| < 1), alone vs batch vs split: %lld differ,"
           " %lld counts left\n", c->name, worst, (long long)bad, (long long)left);
    bad += left;
    if (!(worst < 1e-5) || bad)
        fail_msg("attention %s: error %.3g, %lld batch-variant values", c->name, worst, (long long)bad);
    free(out);
    free(q);
    free(k);
    if (!c->mla)
        free(v);
    free(sinks);
    free(ref);
    spc_free(dq);
    spc_free(dk);
    if (!c->mla)
        spc_free(dv);
    spc_free(dsinks);
    spc_free(dout);
    spc_free(done);
}

static void test_attention(void **state)
{
    (void)state;
    NEED_GPU();
    const attn_case cases[] = {
        {"MHA d64 short", 4, 4, 64, 64, 0, 0, 5, 0, 0, 0},
        {"GQA 8/2 d128 pos0 300", 8, 2, 128, 128, 0, 300, 17, 0, 0, 0},
        {"MQA d80 sinks", 6, 1, 80, 80, 0, 129, 9, 0, 1, 0},
        {"GQA sinks window 128", 8, 4, 64, 64, 0, 400, 17, 128, 1, 0},
        {"window 1 sinks", 2, 1, 64, 64, 0, 10, 3, 1, 1, 0},
        {"MLA 576/512", 4, 1, 576, 512, 0, 200, 6, 0, 0, 1},
        {"head dim 33", 3, 3, 33, 33, 0, 130, 4, 0, 0, 0},
        {"decode GQA ctx 1000", 8, 2, 64, 64, 0, 999, 1, 0, 0, 0},
        {"decode ctx 129 sinks", 4, 4, 64, 64, 0, 128, 2, 0, 1, 0},
        {"decode window 300 sinks", 4, 4, 64, 64, 0, 700, 2, 300, 1, 0},
        {"decode d128 ctx 600", 2, 1, 128, 128, 0, 599, 1, 0, 0, 0},
        {"decode MLA ctx 400", 4, 1, 576, 512, 0, 399, 1, 0, 0, 1},
        {"verify GQA 32/8 ctx 250", 32, 8, 64, 64, 0, 241, 9, 0, 0, 0},
        /* several queries a warp (staged, no window): a warp's queries across a chunk
         * boundary and a 300-token prefill (the block's queries past n_tok: "verify GQA
         * 32/8" above, 9 tokens, run through the warp kernels as which = 2) */
        {"GQA 16/4 sinks pos0 121", 16, 4, 64, 64, 0, 121, 20, 0, 1, 0},
        {"prefill GQA 32/8 from 0", 32, 8, 64, 64, 0, 0, 300, 0, 0, 0},
    };
    const char *only = getenv("SPECULA_TEST_ATTN_CASES");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!only || strstr(cases[i].name, only))
            run_attn_case(&cases[i]);
}

static void test_attention_long(void **state)
{
    (void)state;
    NEED_GPU();
    attn_case c = {"GQA ctx 8192 sinks", 4, 2, 64, 64, 0, 8190, 2, 0, 1, 0};
    run_attn_case(&c);
}

/* ---- RoPE + KV store ------------------------------------------------------------- */

/* spc_rope_kv_store == spc_rope(q), spc_rope(k), spc_kv_store(k), spc_kv_store(v), bit for
 * bit (partial rotary, GQA, rows stored out of order, pairs over several blocks). */
static void test_rope_kv_store(void **state)
{
    (void)state;
    NEED_GPU();
    const int64_t n = 5, nq = 16, nk = 2, hd = 64, rd = 32, vw = nk * hd, ctx = 9; /* 3 blocks of pairs */
    const int32_t pos[5] = {7, 2, 3, 8, 0};
    float *q = malloc((size_t)(n * nq * hd) * 4), *k = malloc((size_t)(n * nk * hd) * 4);
    float *v = malloc((size_t)(n * vw) * 4), *cs = malloc((size_t)(n * rd) * 4);
    fill(q, n * nq * hd, 1.0f);
    fill(k, n * nk * hd, 0.7f);
    fill(v, n * vw, 0.3f);
    fill(cs, n * rd, 1.0f);
    float *dq[2], *dk[2], *kc[2], *vc[2];
    const float *dv = dev_from(v, (size_t)(n * vw) * 4), *dcs = dev_from(cs, (size_t)(n * rd) * 4);
    int32_t *dpos = (int32_t *)dev_from(pos, sizeof pos);
    for (int i = 0; i < 2; i++) {
        dq[i] = dev_from(q, (size_t)(n * nq * hd) * 4);
        dk[i] = dev_from(k, (size_t)(n * nk * hd) * 4);
        kc[i] = dev_poison(ctx * nk * hd);
        vc[i] = dev_poison(ctx * vw);
    }
    CK(spc_rope(g_stream, dq[0], n, nq, nq * hd, hd, rd, dcs, 0));
    CK(spc_rope(g_stream, dk[0], n, nk, nk * hd, hd, rd, dcs, 0));
    CK(spc_kv_store(g_stream, kc[0], nk * hd, dpos, dk[0], nk * hd, n, nk * hd));
    CK(spc_kv_store(g_stream, vc[0], vw, dpos, dv, vw, n, vw));
    CK(spc_rope_kv_store(g_stream, dq[1], dk[1], dv, n, nq, nk, hd, rd, vw, dcs, dpos, kc[1], vc[1]));
    const float *pairs[4][2] = {{dq[0], dq[1]}, {dk[0], dk[1]}, {kc[0], kc[1]}, {vc[0], vc[1]}};
    const int64_t lens[4] = {n * nq * hd, n * nk * hd, ctx * nk * hd, ctx * vw};
    for (int i = 0; i < 4; i++) {
        float *a = host_of(pairs[i][0], lens[i]), *b = host_of(pairs[i][1], lens[i]);
        int64_t bad = count_diff_bits(a, b, lens[i]);
        if (bad)
            fail_msg("rope_kv_store: %lld values of output %d differ from the four ops", (long long)bad, i);
        free(a);
        free(b);
    }
    for (int i = 0; i < 2; i++) {
        spc_free(dq[i]);
        spc_free(dk[i]);
        spc_free(kc[i]);
        spc_free(vc[i]);
    }
    spc_free((void *)dv);
    spc_free((void *)dcs);
    spc_free(dpos);
    free(q);
    free(k);
    free(v);
    free(cs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_long),
        cmocka_unit_test(test_rope_kv_store),
    };
    const char *only = getenv("SPECULA_TEST_FILTER");
    if (only && *only)
        cmocka_set_test_filter(only);
    int rc = cmocka_run_group_tests(tests, cuda_group_setup, cuda_group_teardown);
    return rc == 0 && !g_have_gpu ? 77 : rc;
}
