/* test_batch_sessions.c: sequences evaluated together (sp_batch_eval) get bit-identical
 * logits to each sequence evaluated alone — random mixes of prompt chunks and decode
 * steps, several sessions with different lengths, items asking for every row's logits or
 * only the last one (the LM head then runs over rows gathered from several sequences) —
 * greedy picks made without reading the logits back (sp_session_eval_greedy) equal the
 * argmax of the logits, greedy decoding with the steps fed on the device
 * (sp_session_decode_greedy) picks what the step-by-step loop picks (also beside another
 * thread's passes), and two threads evaluating two
 * sessions of one model get the same results as one thread doing both (the model's pass
 * is serialized; run under ThreadSanitizer by scripts/test.sh). */
#include "backend/backend.h"
#include "engine/forward.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "device_shim.h"
#include "test_util.h"
#include "util/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_SEQ 5
#define MAX_LEN 40

typedef struct seq {
    int32_t toks[MAX_LEN];
    int len;
    float *alone;  /* [len, V] logits of the sequence evaluated by itself */
    float *batched;
    bool checked[MAX_LEN]; /* the batched logits of this position were read back */
    sp_session *s;
    int done;
} seq;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static void eval_alone(sp_model *m, seq *q, int64_t V)
{
    sp_error err = {0};
    sp_session *s;
    sp_session_params sp = {.n_ctx = 64};
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
    q->alone = malloc((size_t)q->len * (size_t)V * sizeof(float));
    if (sp_session_eval(s, q->toks, (size_t)q->len, q->alone, &err) != SP_OK)
        fail_msg("%s", err.msg);
    sp_session_free(s);
}

/* One random step: every unfinished sequence contributes a prompt chunk or one token. */
static bool batch_step(sp_model *m, seq *qs, int64_t V)
{
    sp_batch_item items[N_SEQ];
    seq *of[N_SEQ];
    size_t n = 0;
    for (int i = 0; i < N_SEQ; i++) {
        seq *q = &qs[i];
        if (q->done >= q->len || rnd(4) == 0) /* finished, or sits this step out */
            continue;
        int left = q->len - q->done;
        int take = rnd(3) == 0 ? 1 + (int)rnd((uint32_t)left) : 1;
        bool all_rows = rnd(2) == 0; /* else only the last row (sp_session_last_logits) */
        for (int t = 0; t < take; t++)
            q->checked[q->done + t] = all_rows;
        of[n] = q;
        items[n++] = (sp_batch_item){
            .session = q->s, .tokens = q->toks + q->done, .n_tokens = (size_t)take,
            .logits = all_rows ? q->batched + (size_t)q->done * (size_t)V : NULL};
        q->done += take;
    }
    if (!n)
        return false;
    sp_error err = {0};
    if (sp_batch_eval(m, items, n, &err) != SP_OK)
        fail_msg("%s", err.msg);
    for (size_t i = 0; i < n; i++) {
        const float *last = sp_session_last_logits(items[i].session);
        assert_non_null(last);
        memcpy(of[i]->batched + (size_t)(of[i]->done - 1) * (size_t)V, last, (size_t)V * sizeof(float));
        of[i]->checked[of[i]->done - 1] = true;
    }
    return true;
}

static void check_model(const char *name)
{
    sp_model *m = open_fixture_model(name, 2);
    int64_t V = sp_model_n_vocab(m);
    seq qs[N_SEQ];
    memset(qs, 0, sizeof qs);
    sp_error err = {0};
    for (int i = 0; i < N_SEQ; i++) {
        qs[i].len = 3 + (int)rnd(MAX_LEN - 3);
        for (int t = 0; t < qs[i].len; t++)
            qs[i].toks[t] = (int32_t)rnd((uint32_t)V);
        eval_alone(m, &qs[i], V);
        qs[i].batched = calloc((size_t)qs[i].len * (size_t)V, sizeof(float));
        sp_session_params sp = {.n_ctx = 64, .n_batch = 16}; /* passes split as well */
        assert_int_equal(sp_session_new(m, &sp, &qs[i].s, &err), SP_OK);
    }
    int steps = 0;
    for (;;) {
        bool any = false;
        for (int i = 0; i < N_SEQ; i++)
            any |= qs[i].done < qs[i].len;
        if (!any)
            break;
        steps += batch_step(m, qs, V);
    }
    assert_true(steps > 3);
    int n_checked = 0;
    for (int i = 0; i < N_SEQ; i++) {
        for (int t = 0; t < qs[i].len; t++)
            if (qs[i].checked[t] && ++n_checked && memcmp(qs[i].alone + (size_t)t * V, qs[i].batched + (size_t)t * V,
                       (size_t)V * sizeof(float)))
                fail_msg("%s: sequence %d position %d: batched logits differ from alone", name, i, t);
        assert_int_equal(sp_session_n_past(qs[i].s), qs[i].len);
        sp_session_free(qs[i].s);
        free(qs[i].alone);
        free(qs[i].batched);
    }
    assert_true(n_checked >= N_SEQ * 3); /* at least the last position of every step */
    sp_model_close(m);
}

static void test_batch_dense(void **state)
{
    (void)state;
    check_model("llama_gqa4_tied_f16");
    check_model("qwen3_gqa2_tied");
}

static void test_batch_moe_mla(void **state)
{
    (void)state;
    check_model("gptoss_mxfp4");
    check_model("qwen3moe_mixed_bf16");
    check_model("deepseekv3_qlora_yarn");
}

static void test_batch_bad_items(void **state)
{
    (void)state;
    sp_model *m = open_fixture_model("llama_mha_bf16", 1);
    sp_session *s;
    sp_error err = {0};
    assert_int_equal(sp_session_new(m, NULL, &s, &err), SP_OK);
    int32_t t[2] = {1, 2};
    sp_batch_item dup[2] = {{.session = s, .tokens = t, .n_tokens = 1}, {.session = s, .tokens = t + 1, .n_tokens = 1}};
    assert_int_equal(sp_batch_eval(m, dup, 2, &err), SP_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "share a session"));
    int32_t bad = (int32_t)sp_model_n_vocab(m);
    sp_batch_item oob = {.session = s, .tokens = &bad, .n_tokens = 1};
    assert_int_equal(sp_batch_eval(m, &oob, 1, &err), SP_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "batch item 0"));
    assert_int_equal(sp_session_n_past(s), 0);
    sp_session_free(s);
    sp_model_close(m);
}

/* ---- greedy picks without the logits ---------------------------------------------- */

/* sp_session_eval_greedy picks what sp_argmax picks from sp_session_eval's logits, for a
 * prompt split over passes and then decode steps, alternating with plain evals in the same
 * session (recorded passes of both kinds); where only the pick came back the last logits
 * are NULL, elsewhere they are the plain eval's. */
static void check_greedy(const char *name)
{
    sp_model *m = open_fixture_model(name, 2);
    const int64_t V = sp_model_n_vocab(m);
    sp_session_params sp = {.n_ctx = 80, .n_batch = 16};
    sp_session *g, *p;
    sp_error err = {0};
    assert_int_equal(sp_session_new(m, &sp, &g, &err), SP_OK);
    assert_int_equal(sp_session_new(m, &sp, &p, &err), SP_OK);
    int32_t prompt[21];
    for (int i = 0; i < 21; i++)
        prompt[i] = (int32_t)((i * 37 + 5) % V);
    int32_t pick = -1;
    /* missing outputs are refused before anything is evaluated */
    assert_int_equal(sp_session_eval_greedy(g, prompt, 21, NULL, &err), SP_ERR_INVALID_ARG);
    assert_int_equal(sp_session_eval_picks(g, prompt, 5, NULL, &pick, &err), SP_ERR_INVALID_ARG);
    assert_int_equal(sp_session_n_past(g), 0);
    if (sp_session_eval_greedy(g, prompt, 21, &pick, &err) != SP_OK ||
        sp_session_eval(p, prompt, 21, NULL, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    int device_picks = 0;
    for (int step = 0; step < 12; step++) {
        const float *pl = sp_session_last_logits(p), *gl = sp_session_last_logits(g);
        assert_non_null(pl);
        const int32_t want = sp_argmax(pl, V);
        if (step % 3 != 2) { /* g's last eval was greedy */
            if (pick != want)
                fail_msg("%s step %d: greedy eval picked %d, the logits' argmax is %d", name, step,
                         pick, want);
            if (gl)
                assert_memory_equal(gl, pl, (size_t)V * sizeof(float));
            else
                device_picks++;
        } else {
            assert_non_null(gl);
            assert_memory_equal(gl, pl, (size_t)V * sizeof(float));
        }
        const int32_t tok = want;
        sp_status st = step % 3 == 1 ? sp_session_eval(g, &tok, 1, NULL, &err)
                                     : sp_session_eval_greedy(g, &tok, 1, &pick, &err);
        if (st != SP_OK || sp_session_eval(p, &tok, 1, NULL, &err) != SP_OK)
            fail_msg("%s: %s", name, err.msg);
    }
    /* every row's pick of a 5-token chunk (a verify pass), then a 20-token one (two passes of
     * 16: picked from the logits on every backend) */
    for (int len = 5; len <= 20; len += 15) {
        int32_t chunk[20], picks[20];
        float *rows = malloc((size_t)len * (size_t)V * sizeof(float)),
              *ref = malloc((size_t)len * (size_t)V * sizeof(float));
        for (int i = 0; i < len; i++)
            chunk[i] = (int32_t)((i * 11 + 3) % V);
        if (sp_session_eval_picks(g, chunk, (size_t)len, rows, picks, &err) != SP_OK ||
            sp_session_eval(p, chunk, (size_t)len, ref, &err) != SP_OK)
            fail_msg("%s: %s", name, err.msg);
        for (int i = 0; i < len; i++)
            if (picks[i] != sp_argmax(ref + (size_t)i * (size_t)V, V))
                fail_msg("%s: row %d of %d: picked %d, the logits' argmax is %d", name, i, len,
                         picks[i], sp_argmax(ref + (size_t)i * (size_t)V, V));
        if (sp_session_last_logits(g)) {
            assert_memory_equal(rows, ref, (size_t)len * (size_t)V * sizeof(float));
        } else {
            assert_int_equal(len, 5); /* a 20-token chunk (two passes) reads its logits */
            device_picks++;
        }
        free(rows);
        free(ref);
    }
    /* only a backend that picks on the device leaves the logits unread */
    if (strcmp(test_device(), "cpu") == 0)
        assert_int_equal(device_picks, 0);
    else
        assert_true(device_picks > 0);
    sp_session_free(g);
    sp_session_free(p);
    sp_model_close(m);
}

/* sp_batch_eval's picks: three sessions decoding together give the picks each gets alone
 * (sp_session_eval_greedy); in steps where one item asks for its logits rows instead,
 * the others' picks come from their logits, the same picks. */
static void check_batch_picks(const char *name)
{
    sp_model *m = open_fixture_model(name, 2);
    const int64_t V = sp_model_n_vocab(m);
    sp_session_params sp = {.n_ctx = 64, .n_batch = 16};
    sp_error err = {0};
    sp_session *b[3], *a[3];
    int32_t next_b[3], next_a[3];
    float *rows = malloc((size_t)V * sizeof(float));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sp_session_new(m, &sp, &b[i], &err), SP_OK);
        assert_int_equal(sp_session_new(m, &sp, &a[i], &err), SP_OK);
        int32_t prompt[7];
        for (int t = 0; t < 7; t++)
            prompt[t] = (int32_t)((t * 13 + i * 5 + 1) % V);
        if (sp_session_eval_greedy(a[i], prompt, 7, &next_a[i], &err) != SP_OK ||
            sp_session_eval_greedy(b[i], prompt, 7, &next_b[i], &err) != SP_OK)
            fail_msg("%s: %s", name, err.msg);
    }
    for (int step = 0; step < 8; step++) {
        sp_batch_item items[3];
        int32_t tok[3];
        for (int i = 0; i < 3; i++) {
            assert_int_equal(next_b[i], next_a[i]);
            tok[i] = next_a[i];
            const bool wants_rows = step % 4 == 3 && i == 1; /* a mixed pass */
            items[i] = (sp_batch_item){.session = b[i], .tokens = &tok[i], .n_tokens = 1,
                                         .logits = wants_rows ? rows : NULL, .pick = &next_b[i]};
        }
        if (sp_batch_eval(m, items, 3, &err) != SP_OK)
            fail_msg("%s: %s", name, err.msg);
        for (int i = 0; i < 3; i++)
            if (sp_session_eval_greedy(a[i], &tok[i], 1, &next_a[i], &err) != SP_OK)
                fail_msg("%s: %s", name, err.msg);
        if (step % 4 == 3) /* the mixed pass read every item's logits back */
            for (int i = 0; i < 3; i++)
                assert_non_null(sp_session_last_logits(b[i]));
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(next_b[i], next_a[i]);
        sp_session_free(a[i]);
        sp_session_free(b[i]);
    }
    free(rows);
    sp_model_close(m);
}

static void test_greedy_picks(void **state)
{
    (void)state;
    check_greedy("llama_gqa4_tied_f16");
    check_greedy("gptoss_mxfp4");
    check_batch_picks("qwen3_gqa2_tied");
    check_batch_picks("gptoss_mxfp4");
}

/* ---- greedy decoding fed on the device --------------------------------------------- */

/* Collects picks; stops after `stop_after` of them (0: never). */
typedef struct picks_cb {
    int32_t got[64];
    size_t n, stop_after;
} picks_cb;

static bool collect(void *p, int32_t pick)
{
    picks_cb *c = p;
    assert_true(c->n < 64);
    c->got[c->n++] = pick;
    return !c->stop_after || c->n < c->stop_after;
}

/* The chain (engine/forward_chain.c) on the CPU: the CPU backend's ops with the picks
 * (device_shim.h) and the queued copies added in host memory, as a GPU backend has them, so
 * that the engine's chained passes (each step's token read from the pick before) also run
 * here, under the sanitizers. */
static int g_queued_reads;
static int32_t g_read_slot[SP_QUEUED_READS];
static sp_backend_ops g_chain_ops;

static sp_status host_read_queued(sp_backend *be, int slot, const void *src, size_t bytes,
                                  sp_error *err)
{
    (void)be, (void)err;
    assert_true(slot >= 0 && slot < SP_QUEUED_READS && bytes == sizeof(int32_t));
    memcpy(&g_read_slot[slot], src, bytes);
    g_queued_reads++;
    return SP_OK;
}

static int g_waits, g_fail_wait = -1; /* the wait that fails (counted from 0), -1 none */

static sp_status host_read_wait(sp_backend *be, int slot, void *dst, size_t bytes, sp_error *err)
{
    (void)be;
    assert_true(slot >= 0 && slot < SP_QUEUED_READS && bytes == sizeof(int32_t));
    if (g_waits++ == g_fail_wait)
        return sp_err(err, SP_ERR_INTERNAL, "planted failure of queued read %d", slot);
    memcpy(dst, &g_read_slot[slot], bytes);
    return SP_OK;
}

/* Gives m's backend the ops the chain needs (the CPU's, plus the above). */
static void chain_on_cpu(sp_model *m)
{
    test_shim_ops(m->be->ops, &g_chain_ops, 0); /* the picks (device_shim.h) */
    g_chain_ops.upload_queued = g_chain_ops.upload;
    g_chain_ops.download_queued = host_read_queued;
    g_chain_ops.download_wait = host_read_wait;
    m->be->ops = &g_chain_ops;
}

/* sp_session_decode_greedy gives the picks of sp_session_eval_greedy in a loop: all at once;
 * stopped by its callback after 5 and resumed (the step queued ahead of the stop wrote a
 * cache row the resumed steps overwrite); then the session goes on as the loop's did. On
 * CUDA the steps take their tokens from the device picks (the chain); on the CPU the loop,
 * and the chain again with the CPU backend's ops given picks and queued copies. */
static void check_decode_greedy(const char *name, bool chain_cpu)
{
    sp_model *m = open_fixture_model(name, 2);
    const sp_backend_ops *own = m->be->ops;
    if (chain_cpu)
        chain_on_cpu(m);
    const int64_t V = sp_model_n_vocab(m);
    sp_session_params sp = {.n_ctx = 48, .n_batch = 16};
    sp_session *loop, *all, *parts;
    sp_error err = {0};
    assert_int_equal(sp_session_new(m, &sp, &loop, &err), SP_OK);
    assert_int_equal(sp_session_new(m, &sp, &all, &err), SP_OK);
    assert_int_equal(sp_session_new(m, &sp, &parts, &err), SP_OK);
    int32_t prompt[9], first = -1, f2 = -1, f3 = -1, want[20];
    for (int i = 0; i < 9; i++)
        prompt[i] = (int32_t)((i * 29 + 3) % V);
    if (sp_session_eval_greedy(loop, prompt, 9, &first, &err) != SP_OK ||
        sp_session_eval_greedy(all, prompt, 9, &f2, &err) != SP_OK ||
        sp_session_eval_greedy(parts, prompt, 9, &f3, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    assert_int_equal(f2, first);
    assert_int_equal(f3, first);
    int32_t tok = first;
    for (int i = 0; i < 20; i++) {
        if (sp_session_eval_greedy(loop, &tok, 1, &want[i], &err) != SP_OK)
            fail_msg("%s: %s", name, err.msg);
        tok = want[i];
    }
    /* refused before anything runs */
    size_t n = 99;
    assert_int_equal(sp_session_decode_greedy(all, first, 4, NULL, NULL, NULL, &err), SP_ERR_INVALID_ARG);
    assert_int_equal(sp_session_decode_greedy(all, first, 40, NULL, NULL, &n, &err), SP_ERR_LIMIT);
    assert_int_equal(sp_session_decode_greedy(all, (int32_t)V, 4, NULL, NULL, &n, &err), SP_ERR_INVALID_ARG);
    assert_int_equal(sp_session_decode_greedy(all, first, 0, NULL, NULL, &n, &err), SP_OK);
    assert_int_equal(n, 0);
    assert_int_equal(sp_session_n_past(all), 9);
    picks_cb a = {.n = 0};
    if (sp_session_decode_greedy(all, first, 20, collect, &a, &n, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    assert_int_equal(n, 20);
    assert_int_equal(a.n, 20);
    assert_memory_equal(a.got, want, sizeof want);
    assert_int_equal(sp_session_n_past(all), 29);
    picks_cb b = {.stop_after = 5};
    if (sp_session_decode_greedy(parts, first, 20, collect, &b, &n, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    assert_int_equal(n, 5);
    assert_int_equal(sp_session_n_past(parts), 14);
    b.stop_after = 0;
    if (sp_session_decode_greedy(parts, b.got[4], 15, collect, &b, &n, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    assert_int_equal(n, 15);
    assert_int_equal(b.n, 20);
    assert_memory_equal(b.got, want, sizeof want);
    /* the sessions go on as the loop's: the next pick after want[19] */
    int32_t p_loop = -1, p_all = -1, p_parts = -1;
    if (sp_session_eval_greedy(loop, &want[19], 1, &p_loop, &err) != SP_OK ||
        sp_session_eval_greedy(all, &want[19], 1, &p_all, &err) != SP_OK ||
        sp_session_eval_greedy(parts, &want[19], 1, &p_parts, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    assert_int_equal(p_all, p_loop);
    assert_int_equal(p_parts, p_loop);
    sp_session_free(loop);
    sp_session_free(all);
    sp_session_free(parts);
    m->be->ops = own;
    sp_model_close(m);
}

/* A read back failing inside the chain: the error comes back with the picks delivered
 * before it, the session holds just those steps, and the model and the session go on
 * (the lock released, the rows the failed steps wrote overwritten). */
static void check_chain_failure(const char *name)
{
    sp_model *m = open_fixture_model(name, 2);
    const sp_backend_ops *own = m->be->ops;
    chain_on_cpu(m);
    sp_session_params sp = {.n_ctx = 48, .n_batch = 16};
    sp_session *loop, *s;
    sp_error err = {0};
    assert_int_equal(sp_session_new(m, &sp, &loop, &err), SP_OK);
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
    int32_t prompt[7], first = -1, f2 = -1, want[12];
    for (int i = 0; i < 7; i++)
        prompt[i] = (int32_t)((i * 17 + 11) % sp_model_n_vocab(m));
    if (sp_session_eval_greedy(loop, prompt, 7, &first, &err) != SP_OK ||
        sp_session_eval_greedy(s, prompt, 7, &f2, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    int32_t tok = first;
    for (int i = 0; i < 12; i++) {
        if (sp_session_eval_greedy(loop, &tok, 1, &want[i], &err) != SP_OK)
            fail_msg("%s: %s", name, err.msg);
        tok = want[i];
    }
    picks_cb a = {.n = 0};
    size_t n = 99;
    g_waits = 0;
    g_fail_wait = 3;
    assert_int_equal(sp_session_decode_greedy(s, first, 12, collect, &a, &n, &err), SP_ERR_INTERNAL);
    g_fail_wait = -1;
    assert_non_null(strstr(err.msg, "planted failure"));
    assert_int_equal(n, 3);
    assert_int_equal(a.n, 3);
    assert_memory_equal(a.got, want, 3 * sizeof(int32_t));
    assert_int_equal(sp_session_n_past(s), 7 + 3);
    /* it evaluated first, want[0] and want[1]: want[2] is next, and gives want[3] .. */
    picks_cb b = {.n = 0};
    if (sp_session_decode_greedy(s, want[2], 9, collect, &b, &n, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    assert_int_equal(n, 9);
    assert_memory_equal(b.got, want + 3, 9 * sizeof(int32_t));
    sp_session_free(loop);
    sp_session_free(s);
    m->be->ops = own;
    sp_model_close(m);
}

static void test_decode_greedy(void **state)
{
    (void)state;
    check_decode_greedy("llama_gqa4_tied_f16", false);
    check_decode_greedy("gptoss_mxfp4", false);
    if (strcmp(test_device(), "cpu") != 0)
        return; /* a GPU backend ran the chain above */
    g_queued_reads = 0;
    check_decode_greedy("llama_gqa4_tied_f16", true);
    check_decode_greedy("gptoss_mxfp4", true);
    /* the chain ran, every step a queued read: 20 steps, then 5 + the one queued ahead of
     * the stop + 15, for each model */
    assert_int_equal(g_queued_reads, 2 * (20 + 6 + 15));
    check_chain_failure("llama_gqa4_tied_f16");
}

/* ---- two threads, one model ---------------------------------------------------------- */

typedef struct worker {
    sp_model *m;
    int32_t toks[32];
    float *logits;
    sp_status st;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    sp_session *s;
    sp_session_params sp = {.n_ctx = 64, .n_batch = 8};
    w->st = sp_session_new(w->m, &sp, &s, NULL);
    int64_t V = sp_model_n_vocab(w->m);
    for (int i = 0; i < 32 && w->st == SP_OK; i++) /* one token at a time: many passes */
        w->st = sp_session_eval(s, w->toks + i, 1, w->logits + (size_t)i * V, NULL);
    sp_session_free(s);
    return NULL;
}

static void test_two_threads_one_model(void **state)
{
    (void)state;
    sp_model *m = open_fixture_model("qwen3moe_mixed_bf16", 2);
    int64_t V = sp_model_n_vocab(m);
    worker w[2], ref[2];
    for (int k = 0; k < 2; k++) {
        w[k].m = ref[k].m = m;
        for (int i = 0; i < 32; i++)
            w[k].toks[i] = ref[k].toks[i] = (int32_t)((i * 7 + k * 13 + 1) % V);
        w[k].logits = malloc(32 * (size_t)V * sizeof(float));
        ref[k].logits = malloc(32 * (size_t)V * sizeof(float));
        work(&ref[k]); /* sequentially first */
        assert_int_equal(ref[k].st, SP_OK);
    }
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_create(&th[k], NULL, work, &w[k]), 0);
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(w[k].st, SP_OK);
        assert_memory_equal(w[k].logits, ref[k].logits, 32 * (size_t)V * sizeof(float));
        free(w[k].logits);
        free(ref[k].logits);
    }
    sp_model_close(m);
}

/* A chain (the CPU shim above) in one thread while another thread evaluates another session
 * of the same model token by token: the chain holds the model for its whole length, the
 * other thread's passes wait, and both get what they get alone (TSan: no race). */
typedef struct chainer {
    sp_model *m;
    int32_t first;
    int32_t picks[24];
    int n;
    sp_status st;
} chainer;

static bool keep_pick(void *p, int32_t pick)
{
    chainer *c = p; /* no cmocka asserts off the main thread: the count is checked after */
    if (c->n < 24)
        c->picks[c->n] = pick;
    c->n++;
    return true;
}

static void *chain_work(void *arg)
{
    chainer *c = arg;
    sp_session *s;
    sp_session_params sp = {.n_ctx = 64, .n_batch = 8};
    c->st = sp_session_new(c->m, &sp, &s, NULL);
    size_t n = 0;
    if (c->st == SP_OK)
        c->st = sp_session_decode_greedy(s, c->first, 24, keep_pick, c, &n, NULL);
    if (c->st == SP_OK && (n != 24 || c->n != 24))
        c->st = SP_ERR_INTERNAL;
    sp_session_free(s);
    return NULL;
}

static void test_chain_beside_a_thread(void **state)
{
    (void)state;
    if (strcmp(test_device(), "cpu") != 0)
        skip(); /* the shim is the CPU backend's */
    sp_model *m = open_fixture_model("qwen3moe_mixed_bf16", 2);
    const sp_backend_ops *own = m->be->ops;
    chain_on_cpu(m);
    int64_t V = sp_model_n_vocab(m);
    worker w, ref;
    w.m = ref.m = m;
    for (int i = 0; i < 32; i++)
        w.toks[i] = ref.toks[i] = (int32_t)((i * 5 + 3) % V);
    w.logits = malloc(32 * (size_t)V * sizeof(float));
    ref.logits = malloc(32 * (size_t)V * sizeof(float));
    work(&ref);
    assert_int_equal(ref.st, SP_OK);
    chainer c = {.m = m, .first = 7}, cref = {.m = m, .first = 7};
    chain_work(&cref);
    assert_int_equal(cref.st, SP_OK);
    pthread_t th[2];
    assert_int_equal(pthread_create(&th[0], NULL, chain_work, &c), 0);
    assert_int_equal(pthread_create(&th[1], NULL, work, &w), 0);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    assert_int_equal(c.st, SP_OK);
    assert_int_equal(w.st, SP_OK);
    assert_memory_equal(c.picks, cref.picks, sizeof c.picks);
    assert_memory_equal(w.logits, ref.logits, 32 * (size_t)V * sizeof(float));
    free(w.logits);
    free(ref.logits);
    m->be->ops = own;
    sp_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_dense),
        cmocka_unit_test(test_batch_moe_mla),
        cmocka_unit_test(test_batch_bad_items),
        cmocka_unit_test(test_greedy_picks),
        cmocka_unit_test(test_decode_greedy),
        cmocka_unit_test(test_two_threads_one_model),
        cmocka_unit_test(test_chain_beside_a_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
