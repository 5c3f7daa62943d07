/* cli_spec.c: speculative-decoding options of the CLI (see cli_spec.h). */
#include "cli_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A draft on the CPU whose weights are this small runs on one thread: its products are
 * too short to repay waking workers. The bundled 3 MB draft's step took 0.14 ms on one
 * thread and 0.27 ms on two (2-core machine shared with other work, load 6). */
#define SMALL_DRAFT_BYTES (32ull << 20)

static bool small_cpu_draft(const sp_model *m)
{
    return !strncmp(sp_model_device(m), "cpu", 3) && sp_model_weight_bytes(m) < SMALL_DRAFT_BYTES;
}

int cli_spec_open(cli_spec *c, sp_model *target, sp_session *ts, const char *target_dir,
                  sp_tokenizer *target_tok, int64_t n_ctx, const sp_model_params *tp)
{
    sp_error err = {0};
    sp_spec_params *p = &c->params;
    memset(p, 0, sizeof *p);
    if (c->k < 0 || c->k > SP_SPEC_MAX_K)
        return cli_failf("--draft-k %lld must be in [1, %d]", (long long)c->k, SP_SPEC_MAX_K);
    p->k = (int32_t)c->k;
    p->p_min = (float)c->p_min;
    p->adaptive = !c->no_gate;
    if (!strcmp(c->draft, "ngram")) {
        if (c->ngram < 0 || c->ngram > 64)
            return cli_failf("--draft-ngram %lld must be in [1, 64]", (long long)c->ngram);
        p->kind = SP_DRAFT_NGRAM;
        p->ngram_max = c->ngram ? (int32_t)c->ngram : 3;
        p->ngram_min = 1;
        return CLI_OK;
    }
    if (!strcmp(c->draft, "mtp")) { /* the target's own multi-token prediction module */
        p->kind = SP_DRAFT_MTP;
        if (sp_session_new_mtp(ts, &c->draft_session, &err) != SP_OK)
            return cli_fail(&err);
        p->draft = c->draft_session;
        return CLI_OK;
    }
    sp_model *dm = target;
    p->kind = SP_DRAFT_SELF;
    if (strcmp(c->draft, "self")) {
        p->kind = SP_DRAFT_MODEL;
        sp_model_params mp = *tp;
        mp.precision = sp_model_precision(target); /* the draft computes as the target */
        mp.n_ctx = n_ctx;
        char target_dev[64]; /* "cpu" or "cuda:N": the first word of the target's device */
        const char *td = sp_model_device(target);
        snprintf(target_dev, sizeof target_dev, "%.*s", (int)strcspn(td, " "), td);
        mp.device = c->draft_device ? c->draft_device : target_dev;
        /* budgeted with the target when both share a device */
        bool same = !strcmp(mp.device, target_dev) ||
                    (!strcmp(mp.device, "cuda") && !strcmp(target_dev, "cuda:0"));
        mp.reserved_bytes = same ? sp_model_budget_bytes(target, n_ctx) : 0;
        if (sp_model_open(c->draft, &mp, &c->draft_model, &err) != SP_OK)
            return cli_fail(&err);
        if (small_cpu_draft(c->draft_model) && mp.n_threads != 1) {
            sp_model_close(c->draft_model); /* again on one thread */
            c->draft_model = NULL;
            mp.n_threads = 1;
            if (sp_model_open(c->draft, &mp, &c->draft_model, &err) != SP_OK)
                return cli_fail(&err);
        }
        sp_tokenizer *tt = target_tok;
        sp_tokenizer *own_tt = NULL;
        if (!tt && cli_has_tokenizer(target_dir) && sp_tokenizer_open(target_dir, &own_tt, &err) == SP_OK)
            tt = own_tt;
        if (cli_has_tokenizer(c->draft) && sp_tokenizer_open(c->draft, &c->draft_tok, &err) != SP_OK) {
            sp_tokenizer_close(own_tt);
            return cli_fail(&err);
        }
        sp_status st = sp_spec_check_compat(target, c->draft_model, tt, c->draft_tok, &err);
        sp_tokenizer_close(own_tt);
        if (st != SP_OK)
            return cli_fail(&err);
        dm = c->draft_model;
        /* without --draft-k, the draft's own suggestion (num_assistant_tokens) */
        int32_t suggested = sp_model_draft_tokens(dm);
        if (!c->k && suggested > 0)
            p->k = suggested < SP_SPEC_MAX_K ? suggested : SP_SPEC_MAX_K;
    }
    sp_session_params sp = {.n_ctx = n_ctx};
    if (sp_session_new(dm, &sp, &c->draft_session, &err) != SP_OK)
        return cli_fail(&err);
    p->draft = c->draft_session;
    return CLI_OK;
}

void cli_spec_close(cli_spec *c)
{
    sp_session_free(c->draft_session);
    sp_model_close(c->draft_model);
    sp_tokenizer_close(c->draft_tok);
    c->draft_session = NULL;
    c->draft_model = NULL;
    c->draft_tok = NULL;
}

void cli_spec_print_json(FILE *f, const sp_spec_stats *s)
{
    fprintf(f, "{\"drafts\": %lld, \"drafted\": %lld, \"accepted\": %lld, \"acceptance_per_position\": [",
            (long long)s->drafts, (long long)s->drafted, (long long)s->accepted);
    for (int i = 0; i < s->k_max; i++)
        fprintf(f, "%s%.4f", i ? ", " : "", s->drafts ? (double)s->accepted_per_pos[i] / (double)s->drafts : 0.0);
    fprintf(f, "], \"drafted_per_position\": [");
    for (int i = 0; i < s->k_max; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)s->drafted_per_pos[i]);
    fprintf(f, "], \"mean_acceptance_length\": %.4f, \"acceptance_rate\": %.4f, \"plain_steps\": %lld, "
               "\"draft_ms\": %.3f, \"verify_ms\": %.3f}",
            s->drafts ? 1.0 + (double)s->accepted / (double)s->drafts : 0.0,
            s->drafted ? (double)s->accepted / (double)s->drafted : 0.0, (long long)s->plain_steps,
            s->draft_ms, s->verify_ms);
}

void cli_spec_print_summary(FILE *f, const sp_spec_stats *s)
{
    fprintf(f, "specula: speculation: %lld drafts, %lld/%lld draft tokens accepted (%.1f%%), mean "
               "acceptance length %.2f, %lld plain steps, draft %.1f ms, verify %.1f ms\n",
            (long long)s->drafts, (long long)s->accepted, (long long)s->drafted,
            s->drafted ? 100.0 * (double)s->accepted / (double)s->drafted : 0.0,
            s->drafts ? 1.0 + (double)s->accepted / (double)s->drafts : 0.0, (long long)s->plain_steps,
            s->draft_ms, s->verify_ms);
}
