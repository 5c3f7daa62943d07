/* check_spec.c: the speculative-decoding, draft-isolation and chat-template checks of
 * specula check (see check.h). */
#include "diag/check_internal.h"
#include "diag/trace_stats.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEN 24

/* One generation, plain (draft NULL, not self) or speculative. */
static sp_status generate(sp_model *m, sp_model *dm, bool self, const int32_t *prompt, size_t n,
                          float temp, int32_t *out, sp_generate_stats *st, sp_spec_stats *ss,
                          sp_trace_cb draft_trace, void *trace_ctx, sp_error *err)
{
    sp_session *s = NULL, *d = NULL;
    sp_session_params sp = {.n_ctx = (int64_t)n + GEN + 1};
    sp_generate_params gp = {.n_predict = GEN, .ignore_eos = true, .sampling = sp_sampling_default_params()};
    gp.sampling.temperature = temp;
    gp.sampling.seed = 1;
    sp_status rc = sp_session_new(m, &sp, &s, err);
    if (rc == SP_OK && (dm || self))
        rc = sp_session_new(self ? m : dm, &sp, &d, err);
    if (rc == SP_OK && d && draft_trace)
        sp_session_set_trace(d, draft_trace, trace_ctx);
    if (rc == SP_OK && d) {
        sp_spec_params spp = {.kind = self ? SP_DRAFT_SELF : SP_DRAFT_MODEL, .draft = d, .k = 4};
        rc = sp_generate_spec(s, prompt, n, &gp, &spp, NULL, NULL, out, st, ss, err);
    } else if (rc == SP_OK) {
        rc = sp_generate(s, prompt, n, &gp, NULL, NULL, out, st, err);
    }
    sp_session_free(d);
    sp_session_free(s);
    return rc;
}

static int first_diff(const int32_t *a, const int32_t *b, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i] != b[i])
            return i;
    return -1;
}

static void spec_equal(const sp_check_inputs *in, const char *name, sp_model *dm, bool self,
                       sp_check_report *rep)
{
    int32_t plain[GEN], spec[GEN], sampled[GEN];
    sp_generate_stats st;
    sp_spec_stats ss, ss2;
    sp_error err = {0};
    if (generate(in->model, NULL, false, in->prompt, in->n_prompt, 0, plain, &st, NULL, NULL, NULL, &err) ||
        generate(in->model, dm, self, in->prompt, in->n_prompt, 0, spec, &st, &ss, NULL, NULL, &err) ||
        (self && generate(in->model, dm, self, in->prompt, in->n_prompt, 0.8f, sampled, &st, &ss2, NULL, NULL, &err))) {
        sp_check_add(rep, name, SP_CHECK_FAIL, "generation failed: %s", err.msg);
        return;
    }
    int d = first_diff(plain, spec, GEN);
    if (d >= 0)
        sp_check_add(rep, name, SP_CHECK_FAIL, "greedy speculative output differs from plain greedy at "
                     "token %d (%d vs %d)", d, spec[d], plain[d]);
    else if (ss.drafted == 0)
        sp_check_add(rep, name, SP_CHECK_FAIL, "nothing was drafted");
    else if (self && (ss.accepted != ss.drafted || ss2.accepted != ss2.drafted))
        sp_check_add(rep, name, SP_CHECK_FAIL, "self drafting accepted %lld/%lld greedy and %lld/%lld sampled "
                     "drafts; it must accept all (KV or position handling is wrong)", (long long)ss.accepted,
                     (long long)ss.drafted, (long long)ss2.accepted, (long long)ss2.drafted);
    else if (self)
        sp_check_add(rep, name, SP_CHECK_PASS, "%d greedy tokens identical to plain decoding; %lld/%lld greedy "
                     "and %lld/%lld sampled drafts accepted", GEN, (long long)ss.accepted, (long long)ss.drafted,
                     (long long)ss2.accepted, (long long)ss2.drafted);
    else
        sp_check_add(rep, name, ss.accepted ? SP_CHECK_PASS : SP_CHECK_WARN, "%d greedy tokens identical to plain "
                     "decoding; %lld/%lld drafts accepted%s", GEN, (long long)ss.accepted, (long long)ss.drafted,
                     ss.accepted ? "" : " (no draft was ever accepted: a draft that does not pay)");
}

/* ---- draft isolation: its trace inside speculation vs standalone ------------------------ */

typedef struct trace_rec {
    int layer;
    sp_op op;
    int64_t pos;
    uint64_t hash, prefix;
} trace_rec;

typedef struct capture {
    int32_t hist[512];
    trace_rec *r;
    size_t n, cap;
} capture;

static uint64_t prefix_hash(const int32_t *t, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++)
        h = (h ^ (uint64_t)(uint32_t)t[i]) * 0x100000001b3ull;
    return h;
}

static void on_event(void *ctx, const sp_trace_event *ev)
{
    capture *c = ctx;
    for (int64_t i = 0; i < ev->n_tok && ev->pos0 + i < 512; i++) {
        int64_t pos = ev->pos0 + i;
        if (ev->op == SP_OP_EMBED)
            c->hist[pos] = ev->tokens[i];
        if (c->n == c->cap) {
            size_t cap = c->cap ? 2 * c->cap : 1024;
            trace_rec *p = realloc(c->r, cap * sizeof *p);
            if (!p)
                return;
            c->r = p;
            c->cap = cap;
        }
        sp_row_stats s;
        sp_row_stats_compute(ev->data + i * ev->width, ev->width, &s);
        c->r[c->n++] = (trace_rec){ev->layer, ev->op, pos, s.hash, prefix_hash(c->hist, pos + 1)};
    }
}

static void draft_isolation(const sp_check_inputs *in, sp_model *dm, bool self, sp_check_report *rep)
{
    const char *name = "draft isolation";
    sp_model *draft = self ? in->model : dm;
    capture in_spec = {0}, alone = {0};
    int32_t seq[512], out[GEN];
    sp_generate_stats st;
    sp_spec_stats ss;
    sp_error err = {0};
    size_t n = in->n_prompt;
    if (n + GEN > 512) {
        sp_check_add(rep, name, SP_CHECK_WARN, "skipped: prompt too long");
        return;
    }
    if (generate(in->model, dm, self, in->prompt, n, 0, out, &st, &ss, on_event, &in_spec, &err) != SP_OK) {
        sp_check_add(rep, name, SP_CHECK_FAIL, "speculative generation failed: %s", err.msg);
        goto done;
    }
    memcpy(seq, in->prompt, n * sizeof *seq);
    memcpy(seq + n, out, (size_t)st.n_generated * sizeof *seq);
    sp_session *s;
    sp_session_params sp = {.n_ctx = (int64_t)n + st.n_generated};
    if (sp_session_new(draft, &sp, &s, &err) != SP_OK) {
        sp_check_add(rep, name, SP_CHECK_FAIL, "%s", err.msg);
        goto done;
    }
    sp_session_set_trace(s, on_event, &alone);
    sp_status rc = sp_session_eval(s, seq, n + (size_t)st.n_generated, NULL, &err);
    sp_session_free(s);
    if (rc != SP_OK) {
        sp_check_add(rep, name, SP_CHECK_FAIL, "standalone run failed: %s", err.msg);
        goto done;
    }
    size_t compared = 0;
    for (size_t i = 0; i < in_spec.n; i++) {
        const trace_rec *a = &in_spec.r[i];
        for (size_t j = 0; j < alone.n; j++) {
            const trace_rec *b = &alone.r[j];
            if (b->pos != a->pos || b->layer != a->layer || b->op != a->op || b->prefix != a->prefix)
                continue;
            compared++;
            if (a->hash != b->hash) {
                sp_check_add(rep, name, SP_CHECK_FAIL, "the draft's %s at layer %d, position %lld inside "
                             "speculation differs from its standalone run on the same tokens: draft state is "
                             "contaminated", sp_op_name(a->op), a->layer, (long long)a->pos);
                goto done;
            }
            break;
        }
    }
    if (!compared)
        sp_check_add(rep, name, SP_CHECK_WARN, "no draft trace record could be matched to a standalone run");
    else
        sp_check_add(rep, name, SP_CHECK_PASS, "%zu draft op outputs inside speculation equal its standalone "
                     "run bit for bit", compared);
done:
    free(in_spec.r);
    free(alone.r);
}

void sp_check_speculative(const sp_check_inputs *in, sp_check_report *rep)
{
    spec_equal(in, "speculative (self)", NULL, true, rep);
    if (in->draft) {
        sp_error err = {0};
        if (sp_spec_check_compat(in->model, in->draft, NULL, NULL, &err) != SP_OK) {
            sp_check_add(rep, "speculative (draft)", SP_CHECK_FAIL, "%s", err.msg);
            return;
        }
        spec_equal(in, "speculative (draft)", in->draft, false, rep);
    }
    draft_isolation(in, in->draft, in->draft == NULL, rep);
}

/* ---- chat template --------------------------------------------------------------------- */

static int ids_text(char *buf, size_t n, const int32_t *ids, size_t k)
{
    size_t o = 0;
    for (size_t i = 0; i < k && i < 20 && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%d", i ? " " : "", ids[i]);
    if (k > 20 && o < n)
        o += (size_t)snprintf(buf + o, n - o, " ... (%zu)", k);
    return (int)o;
}

void sp_check_chat_template(const sp_check_inputs *in, sp_check_report *rep)
{
    const char *name = "chat template";
    if (!in->tok) {
        sp_check_add(rep, name, SP_CHECK_WARN, "no tokenizer.json: prompts are token ids");
        return;
    }
    sp_chat *chat;
    sp_error err = {0};
    if (sp_chat_open(in->dir, &chat, &err) != SP_OK) {
        sp_check_add(rep, name, SP_CHECK_WARN, "no chat template (%s): prompts must be formatted by hand, "
                     "the most common cause of degenerate output", err.msg);
        return;
    }
    const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello! What is 2+2?\"}], "
                      "\"add_generation_prompt\": true}";
    const char *naive = "User: Hello! What is 2+2?\nAssistant:";
    char *text = NULL;
    size_t len;
    int32_t *a = NULL, *b = NULL, *c = NULL;
    size_t na, nb, nc;
    if (sp_chat_render(chat, ctx, strlen(ctx), NULL, &text, &len, &err) != SP_OK) {
        sp_check_add(rep, name, SP_CHECK_FAIL, "the chat template does not render a one-message "
                     "conversation: %s", err.msg);
        sp_chat_close(chat);
        return;
    }
    sp_chat_close(chat);
    if (sp_tokenizer_encode(in->tok, text, len, false, &a, &na, &err) != SP_OK ||
        sp_tokenizer_encode_prompt(in->tok, naive, strlen(naive), &b, &nb, &err) != SP_OK ||
        sp_tokenizer_encode_prompt(in->tok, text, len, &c, &nc, &err) != SP_OK) {
        sp_check_add(rep, name, SP_CHECK_FAIL, "tokenizing the rendering failed: %s", err.msg);
        goto done;
    }
    char ta[256], tb[256];
    ids_text(ta, sizeof ta, a, na);
    ids_text(tb, sizeof tb, b, nb);
    size_t d = 0;
    while (d < na && d < nb && a[d] == b[d])
        d++;
    int32_t bos = sp_tokenizer_bos_id(in->tok);
    bool double_bos = bos >= 0 && nc >= 2 && c[0] == bos && c[1] == bos;
    sp_check_add(rep, name, double_bos ? SP_CHECK_WARN : SP_CHECK_PASS,
                 "template: %.*s%s\n    template ids: %s\n    naive ids:    %s\n    they differ from "
                 "token %zu on%s", (int)(len > 160 ? 160 : len), text, len > 160 ? "..." : "", ta, tb, d,
                 double_bos ? "\n    tokenizing the rendering with add_special_tokens=True adds a second BOS: "
                              "encode chat prompts as apply_chat_template(tokenize=True) does" : "");
done:
    free(text);
    free(a);
    free(b);
    free(c);
}
