/* test_batch_verify.c: sampled speculation of several sequences in batches, the server's
 * way (sp_batch_eval of the draft model per draft position, then one sp_batch_eval of the
 * target verifying every sequence), with the drafts drawn in the draft's passes and their
 * rows kept (sp_batch_item.keep, sp_draft_sampler_uniform / _drawn) and the verification
 * made by the backend (sp_batch_verify), against the same rounds with every row read back
 * and checked on the host (sp_draft_sampler_next, sp_draft_verifier_check, sp_sampler_next):
 * the same tokens and acceptance counts. On the CPU the device side is device_shim.h's
 * (every third call left to the host, which then reads the kept rows:
 * sp_draft_sampler_kept_q); with SPECULA_TEST_DEVICE=cuda, the CUDA kernels. Model drafts
 * (a perturbed copy of the target: acceptances and rejections) and n-gram style one-hot
 * drafts (every sequence's drafts fixed tokens). Bad verifications are refused. */
#include "device_shim.h"
#include "model/model.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

enum { SEQS = 3, ROUNDS = 6, K = 4, MAXOUT = SEQS * ROUNDS * (K + 1) };

typedef struct seq_state {
    sp_session *t, *d;
    sp_sampler *smp;
    sp_draft_verifier *ver;
    sp_draft_sampler *ds;
    int32_t pending;
    int32_t out[ROUNDS * (K + 1)];
    int n_out, accepted, drafted, all_in; /* all_in: rounds with every draft accepted */
    int on_device;                        /* rounds whose outcome the device gave */
    int left_drawn;                       /* draws the device left to the host */
    float *rows; /* [K + 1, V] */
} seq_state;

static void seq_open(seq_state *q, sp_model *m, sp_model *dm, const sp_sampling_params *p, int i)
{
    sp_session_params sp = {.n_ctx = 128};
    memset(q, 0, sizeof *q);
    assert_int_equal(sp_session_new(m, &sp, &q->t, NULL), SP_OK);
    assert_int_equal(sp_session_new(dm, &sp, &q->d, NULL), SP_OK);
    assert_int_equal(sp_sampler_new(p, sp_model_n_vocab(m), &q->smp, NULL), SP_OK);
    assert_int_equal(sp_draft_verifier_new(p, sp_model_n_vocab(m), &q->ver, NULL), SP_OK);
    assert_int_equal(sp_draft_sampler_new(m, dm, p, K, 0.0f, false, &q->ds, NULL), SP_OK);
    assert_int_equal(sp_session_keep_rows(q->d, K, NULL), SP_OK);
    q->rows = malloc((size_t)(K + 1) * (size_t)sp_model_n_vocab(m) * sizeof(float));
    assert_non_null(q->rows);
    int32_t prompt[6];
    for (int j = 0; j < 6; j++)
        prompt[j] = (int32_t)((j * 7 + i * 13 + 3) % 50 + 1);
    assert_int_equal(sp_session_eval(q->t, prompt, 5, NULL, NULL), SP_OK);
    assert_int_equal(sp_session_eval(q->d, prompt, 5, NULL, NULL), SP_OK);
    q->pending = prompt[5];
}

static void seq_close(seq_state *q)
{
    sp_session_free(q->t);
    sp_session_free(q->d);
    sp_sampler_free(q->smp);
    sp_draft_verifier_free(q->ver);
    sp_draft_sampler_free(q->ds);
    free(q->rows);
}

/* One round's drafts for every sequence: model drafts drawn on the device (kept) or from
 * the rows read back; one-hot drafts (model NULL) fixed tokens. */
static void draft_round(sp_model *dm, const sp_sampling_params *p, seq_state *qs,
                        int32_t drafts[][K], const double *q[][K], bool device, bool model)
{
    if (!model) {
        for (int i = 0; i < SEQS; i++)
            for (int j = 0; j < K; j++) {
                drafts[i][j] = (int32_t)((qs[i].n_out * 3 + j * 5 + i) % 40 + 1);
                q[i][j] = NULL;
            }
        return;
    }
    int32_t tok[SEQS], pick[SEQS];
    for (int i = 0; i < SEQS; i++)
        tok[i] = qs[i].pending;
    for (int j = 0; j < K; j++) {
        sp_batch_item items[SEQS];
        for (int i = 0; i < SEQS; i++) {
            items[i] = (sp_batch_item){.session = qs[i].d, .tokens = &tok[i], .n_tokens = 1};
            if (device) {
                items[i].pick = &pick[i];
                items[i].sampling = p;
                items[i].u = sp_draft_sampler_uniform(qs[i].ds);
                items[i].keep = j + 1;
                items[i].dist = sp_draft_sampler_dist(qs[i].ds, j);
            }
        }
        sp_error err = {0};
        if (sp_batch_eval(dm, items, SEQS, &err) != SP_OK)
            fail_msg("draft pass: %s", err.msg);
        for (int i = 0; i < SEQS; i++) {
            bool last;
            if (device) { /* the row came back where the device left the draw here */
                const float *row = sp_session_last_logits(qs[i].d);
                assert_true(
                    sp_draft_sampler_drawn(qs[i].ds, pick[i], j, row != NULL, &q[i][j], &last));
                assert_true((row != NULL) == (q[i][j] != NULL));
                qs[i].left_drawn += row != NULL;
                drafts[i][j] = pick[i];
            } else {
                assert_true(sp_draft_sampler_next(qs[i].ds, sp_session_last_logits(qs[i].d), j,
                                                  &drafts[i][j], &q[i][j], &last));
            }
            tok[i] = drafts[i][j];
        }
    }
}

/* The host's check of sequence q's rows (drafts[0 .. K)), as the server's loop makes it. */
static int host_check(seq_state *q, const int32_t *drafts, const double *const *qd, bool kept,
                      int64_t V)
{
    int acc = 0;
    for (int i = 0; i <= K; i++) {
        const float *row = q->rows + (size_t)i * (size_t)V;
        if (i == K) {
            q->out[q->n_out++] = sp_sampler_next(q->smp, row);
            break;
        }
        const double *qi = qd[i];
        if (kept && !qi)
            assert_int_equal(sp_draft_sampler_kept_q(q->ds, q->d, i, &qi, NULL), SP_OK);
        int32_t t = sp_draft_verifier_check(q->ver, row, drafts[i], qi, qi ? V : 0);
        q->out[q->n_out++] = t;
        if (t != drafts[i])
            break;
        acc++;
    }
    return acc;
}

/* ROUNDS rounds of every sequence: drafts, one verify batch, the caches cut back. */
static void run_rounds(sp_model *m, sp_model *dm, const sp_sampling_params *p, bool device,
                       bool model, seq_state *qs)
{
    const int64_t V = sp_model_n_vocab(m);
    for (int i = 0; i < SEQS; i++)
        seq_open(&qs[i], m, dm, p, i);
    for (int r = 0; r < ROUNDS; r++) {
        int32_t drafts[SEQS][K], toks[SEQS][K + 1];
        const double *q[SEQS][K];
        int64_t base[SEQS];
        draft_round(dm, p, qs, drafts, q, device, model);
        if (device) /* the backend verifies these (the shim on the CPU) */
            assert_true(sp_session_can_verify(qs[0].t, model ? qs[0].d : NULL));
        sp_batch_item items[SEQS];
        sp_batch_verify ver[SEQS];
        for (int i = 0; i < SEQS; i++) {
            base[i] = sp_session_n_past(qs[i].t);
            toks[i][0] = qs[i].pending;
            memcpy(toks[i] + 1, drafts[i], sizeof drafts[i]);
            items[i] = (sp_batch_item){.session = qs[i].t, .tokens = toks[i], .n_tokens = K + 1,
                                       .logits = qs[i].rows};
            ver[i] = (sp_batch_verify){qs[i].ver, qs[i].smp, model ? qs[i].d : NULL, -1, -1};
            /* as the server: a round with a draft's distribution on the host is the host's */
            bool on_host = false;
            for (int j = 0; j < K; j++)
                on_host |= q[i][j] != NULL;
            if (device && !on_host)
                items[i].verify = &ver[i];
        }
        sp_error err = {0};
        if (sp_batch_eval(m, items, SEQS, &err) != SP_OK)
            fail_msg("verify pass: %s", err.msg);
        for (int i = 0; i < SEQS; i++) {
            seq_state *s = &qs[i];
            int acc;
            if (device && ver[i].accepted >= 0) {
                s->on_device++;
                acc = ver[i].accepted;
                memcpy(s->out + s->n_out, drafts[i], (size_t)acc * sizeof(int32_t));
                s->n_out += acc;
                s->out[s->n_out++] = ver[i].next;
            } else {
                acc = host_check(s, drafts[i], q[i], device && model, V);
            }
            s->accepted += acc;
            s->drafted += K;
            s->all_in += acc == K;
            s->pending = s->out[s->n_out - 1];
            assert_int_equal(sp_session_truncate(s->t, base[i] + 1 + acc, NULL), SP_OK);
            if (sp_session_n_past(s->d) > base[i] + 1 + acc)
                assert_int_equal(sp_session_truncate(s->d, base[i] + 1 + acc, NULL), SP_OK);
            /* the draft session holds what the target holds before the next round's pass:
             * position base + j is toks[i][j] */
            const int64_t have = sp_session_n_past(s->d), want = base[i] + 1 + acc;
            if (have < want)
                assert_int_equal(sp_session_eval(s->d, toks[i] + (have - base[i]), (size_t)(want - have),
                                                 NULL, NULL), SP_OK);
        }
    }
}

static void test_batch_verify_equals_host(void **state)
{
    (void)state;
    char *pdir = perturbed_fixture("llama_mha_bf16", 0.05f);
    sp_model *m = open_fixture_model("llama_mha_bf16", 1), *dm = open_model_dir(pdir, 1);
    const sp_backend_ops *own_t = m->be->ops, *own_d = dm->be->ops;
    const bool cpu = !strcmp(own_t->name, "cpu");
    static sp_backend_ops host_ops, dev_ops;
    test_host_ops(own_t, &host_ops);
    dev_ops = *own_t;
    if (cpu)
        test_shim_ops(own_t, &dev_ops, 3);
    const sp_sampling_params sets[2] = {{.temperature = 1.5f, .top_k = 12, .top_p = 1.0f, .seed = 5},
                                        {.temperature = 0.8f, .top_p = 0.9f, .seed = 9}};
    int64_t accepted = 0, drafted = 0, all_in = 0, on_device = 0, left_drawn = 0;
    for (int si = 0; si < 2; si++)
        for (int model = 0; model < 2; model++) {
            seq_state host[SEQS], dev[SEQS];
            m->be->ops = dm->be->ops = &host_ops;
            run_rounds(m, dm, &sets[si], false, model, host);
            m->be->ops = dm->be->ops = &dev_ops;
            run_rounds(m, dm, &sets[si], true, model, dev);
            m->be->ops = own_t;
            dm->be->ops = own_d;
            for (int i = 0; i < SEQS; i++) {
                if (host[i].n_out != dev[i].n_out ||
                    memcmp(host[i].out, dev[i].out, (size_t)host[i].n_out * sizeof(int32_t)) ||
                    host[i].accepted != dev[i].accepted)
                    fail_msg("warpers %d, %s drafts, sequence %d: %d tokens (%d accepted) on the "
                             "host, %d (%d) on the device", si, model ? "model" : "one-hot", i,
                             host[i].n_out, host[i].accepted, dev[i].n_out, dev[i].accepted);
                accepted += dev[i].accepted;
                drafted += dev[i].drafted;
                all_in += dev[i].all_in;
                on_device += dev[i].on_device;
                left_drawn += dev[i].left_drawn;
                seq_close(&host[i]);
                seq_close(&dev[i]);
            }
        }
    print_message("  %lld of %lld drafts accepted (%lld rounds all accepted); %lld outcomes from the "
                  "device (%d verifications on the shim, %d left to the host); %lld draws left to "
                  "the host\n", (long long)accepted, (long long)drafted, (long long)all_in,
                  (long long)on_device, g_shim.verify_calls, g_shim.verify_left,
                  (long long)left_drawn);
    assert_true(accepted > 0 && accepted < drafted && all_in > 0); /* rejections, bonus tokens */
    assert_true(on_device > 0); /* the device path ran, not only the host's */
    if (cpu)
        assert_true(g_shim.verify_calls > 0 && g_shim.verify_left > 0 && g_shim.draw_left > 0 &&
                    left_drawn > 0);
    sp_model_close(dm);
    sp_model_close(m);
    remove_tree(pdir);
    free(pdir);
}

/* Refused before anything runs: a verification without a logits buffer, without drafts,
 * with a pick, without its verifier; a kept row the session has no room for; a drawn draft
 * that is no token, past k; a kept distribution that was never kept. */
static void test_batch_verify_refuses(void **state)
{
    (void)state;
    sp_model *m = open_fixture_model("llama_mha_bf16", 1);
    const sp_sampling_params p = {.temperature = 1.0f, .top_p = 1.0f, .seed = 1};
    seq_state q;
    seq_open(&q, m, m, &p, 0);
    int32_t toks[3] = {q.pending, 5, 6}, pick = -1;
    sp_batch_verify v = {q.ver, q.smp, NULL, -1, -1};
    const sp_batch_item good = {.session = q.t, .tokens = toks, .n_tokens = 3, .logits = q.rows,
                                .verify = &v};
    sp_batch_item bad[5] = {good, good, good, good, good};
    bad[0].logits = NULL;
    bad[1].n_tokens = 1;
    bad[2].pick = &pick;
    sp_batch_verify nov = {NULL, q.smp, NULL, -1, -1};
    bad[3].verify = &nov;
    bad[4] = (sp_batch_item){.session = q.t, .tokens = toks, .n_tokens = 1, .keep = 1};
    const int64_t past = sp_session_n_past(q.t);
    for (int i = 0; i < 5; i++) {
        sp_error err = {0};
        assert_int_equal(sp_batch_eval(m, &bad[i], 1, &err), SP_ERR_INVALID_ARG);
        assert_int_equal(sp_session_n_past(q.t), past);
    }
    assert_int_equal(sp_session_keep_rows(q.t, -3, NULL), SP_OK); /* nothing to make room for */
    bool last;
    const double *qd = (const double *)&last;
    assert_false(sp_draft_sampler_drawn(q.ds, -1, 0, true, &qd, &last)); /* no such token */
    assert_null(qd);
    assert_false(sp_draft_sampler_drawn(q.ds, (int32_t)sp_model_n_vocab(m), 0, true, &qd, &last));
    assert_false(sp_draft_sampler_drawn(q.ds, 5, K, true, &qd, &last)); /* past k_max */
    assert_null(sp_draft_sampler_dist(q.ds, K));
    assert_null(sp_draft_sampler_dist(q.ds, -1));
    sp_error err = {0};
    assert_int_not_equal(sp_draft_sampler_kept_q(q.ds, q.d, K, &qd, &err), SP_OK);
    assert_int_not_equal(sp_draft_sampler_kept_q(q.ds, q.t, 0, &qd, &err), SP_OK); /* no kept rows */
    seq_close(&q);
    sp_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_verify_equals_host),
        cmocka_unit_test(test_batch_verify_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
