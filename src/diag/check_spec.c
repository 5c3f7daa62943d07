/* check_spec.c: the speculative-decoding, draft-isolation and chat-template checks of
 * specula check (see check.h). */
#include "diag/check_internal.h"
#include "diag/trace_diff.h"
#include "diag/trace_writer.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "text/jinja/chat.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEN 24

/* One generation, plain (draft NULL, not self) or speculative. */
static sp_status generate(sp_model *m, sp_model *dm, bool self, const int32_t *prompt, size_t n,
                          float temp, int32_t *out, sp_generate_stats *st, sp_spec_stats *ss,
                          sp_trace_writer *draft_trace, sp_error *err)
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
        sp_trace_writer_attach(draft_trace, d);
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
    if (generate(in->model, NULL, false, in->prompt, in->n_prompt, 0, plain, &st, NULL, NULL, &err) ||
        generate(in->model, dm, self, in->prompt, in->n_prompt, 0, spec, &st, &ss, NULL, &err) ||
        (self && generate(in->model, dm, self, in->prompt, in->n_prompt, 0.8f, sampled, &st, &ss2, NULL, &err))) {
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

/* ---- draft isolation: its trace inside speculation vs standalone ------------------------
 * Both runs are traced (trace_writer.c) and compared by trace_diff.c, which matches the
 * records of the same op at the same position computed on the same tokens: a rejected
 * draft token's records have no standalone counterpart and are not compared. */

static sp_status read_back(FILE *f, sp_trace_file *t, sp_error *err)
{
    if (fflush(f) || fseek(f, 0, SEEK_SET))
        return sp_err(err, SP_ERR_IO, "cannot read back a temporary trace");
    return sp_trace_read_stream(f, "draft trace", t, err);
}

static void draft_isolation(const sp_check_inputs *in, sp_model *dm, bool self, sp_check_report *rep)
{
    const char *name = "draft isolation";
    sp_model *draft = self ? in->model : dm;
    size_t n = in->n_prompt;
    int32_t *seq = malloc((n + GEN) * sizeof *seq);
    FILE *fa = tmpfile(), *fb = tmpfile();
    sp_trace_writer *wa = NULL, *wb = NULL;
    sp_trace_file ta = {0}, tb = {0};
    sp_trace_diff d = {0};
    sp_generate_stats st;
    sp_spec_stats ss;
    sp_session *s = NULL;
    sp_error err = {0};
    if (!seq || !fa || !fb || sp_trace_writer_new(fa, "draft", &wa, &err) ||
        sp_trace_writer_new(fb, "draft", &wb, &err)) {
        sp_check_add(rep, name, SP_CHECK_FAIL, "could not run: %s", err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    if (generate(in->model, dm, self, in->prompt, n, 0, seq + n, &st, &ss, wa, &err) != SP_OK) {
        sp_check_add(rep, name, SP_CHECK_FAIL, "speculative generation failed: %s", err.msg);
        goto done;
    }
    memcpy(seq, in->prompt, n * sizeof *seq);
    sp_session_params sp = {.n_ctx = (int64_t)n + st.n_generated};
    if (sp_session_new(draft, &sp, &s, &err) != SP_OK) {
        sp_check_add(rep, name, SP_CHECK_FAIL, "%s", err.msg);
        goto done;
    }
    sp_trace_writer_attach(wb, s);
    if (sp_session_eval(s, seq, n + (size_t)st.n_generated, NULL, &err) != SP_OK ||
        read_back(fa, &ta, &err) != SP_OK || read_back(fb, &tb, &err) != SP_OK ||
        sp_trace_diff_run(&ta, &tb, 0, &d, &err) != SP_OK) {
        sp_check_add(rep, name, SP_CHECK_FAIL, "standalone run failed: %s", err.msg);
        goto done;
    }
    if (d.found) {
        const sp_trace_rec *r = &ta.r[d.first.ia];
        sp_check_add(rep, name, SP_CHECK_FAIL, "the draft's %s at layer %d, position %lld inside "
                     "speculation differs from its standalone run on the same tokens: draft state is "
                     "contaminated", r->op, r->layer, (long long)r->position);
    } else if (!d.matched) {
        sp_check_add(rep, name, SP_CHECK_WARN, "no draft trace record could be matched to a standalone run");
    } else {
        sp_check_add(rep, name, SP_CHECK_PASS, "%zu draft op outputs inside speculation equal its standalone "
                     "run bit for bit", d.matched);
    }
done:
    sp_trace_diff_free(&d);
    sp_trace_file_free(&ta);
    sp_trace_file_free(&tb);
    sp_session_free(s);
    sp_trace_writer_free(wa);
    sp_trace_writer_free(wb);
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    free(seq);
}

/* ---- MTP drafting: greedy identical to plain, acceptance reported ---------------------- */

static sp_status generate_mtp(const sp_check_inputs *in, float temp, int32_t *out, sp_spec_stats *ss,
                              sp_error *err)
{
    sp_session *s = NULL, *d = NULL;
    sp_session_params sp = {.n_ctx = (int64_t)in->n_prompt + GEN + 1};
    sp_generate_params gp = {.n_predict = GEN, .ignore_eos = true, .sampling = sp_sampling_default_params()};
    gp.sampling.temperature = temp;
    gp.sampling.seed = 1;
    sp_generate_stats st;
    sp_status rc = sp_session_new(in->model, &sp, &s, err);
    if (rc == SP_OK)
        rc = sp_session_new_mtp(s, &d, err);
    if (rc == SP_OK) {
        sp_spec_params spp = {.kind = SP_DRAFT_MTP, .draft = d, .k = 2};
        rc = sp_generate_spec(s, in->prompt, in->n_prompt, &gp, &spp, NULL, NULL, out, &st, ss, err);
    }
    sp_session_free(d);
    sp_session_free(s);
    return rc;
}

static void mtp_equal(const sp_check_inputs *in, sp_check_report *rep)
{
    const char *name = "speculative (mtp)";
    int32_t plain[GEN], spec[GEN], sampled[GEN];
    sp_generate_stats st;
    sp_spec_stats ss, ss2;
    sp_error err = {0};
    if (generate(in->model, NULL, false, in->prompt, in->n_prompt, 0, plain, &st, NULL, NULL, &err) ||
        generate_mtp(in, 0, spec, &ss, &err) || generate_mtp(in, 0.7f, sampled, &ss2, &err)) {
        sp_check_add(rep, name, SP_CHECK_FAIL, "%s", err.msg);
        return;
    }
    int d = first_diff(plain, spec, GEN);
    if (d >= 0)
        sp_check_add(rep, name, SP_CHECK_FAIL, "greedy MTP-drafted output differs from plain greedy at "
                     "token %d (%d vs %d)", d, spec[d], plain[d]);
    else
        sp_check_add(rep, name, ss.drafted ? SP_CHECK_PASS : SP_CHECK_FAIL, "%d greedy tokens identical "
                     "to plain decoding; %lld/%lld greedy and %lld/%lld sampled (T 0.7) drafts accepted",
                     GEN, (long long)ss.accepted, (long long)ss.drafted, (long long)ss2.accepted,
                     (long long)ss2.drafted);
}

void sp_check_speculative(const sp_check_inputs *in, sp_check_report *rep)
{
    spec_equal(in, "speculative (self)", NULL, true, rep);
    sp_model_info info;
    sp_model_get_info(in->model, &info);
    if (in->mtp || info.n_mtp_layers)
        mtp_equal(in, rep);
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
