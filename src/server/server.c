/* server.c: the lifecycle of `specula serve`:
 *   1. block SIGTERM / SIGINT in every thread (the main thread takes them with sigwait);
 *   2. listen (so /health can answer 503 while loading);
 *   3. open the tokenizer, the chat template, the model and the session pool;
 *   4. ready: print "listening on http://HOST:PORT";
 *   5. on SIGTERM / SIGINT: stop accepting connections, let running requests finish for
 *      the grace period (new ones get 503), cancel the rest, wait until the answers are
 *      sent, close, exit 0. */
#include "server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void model_name(const char *dir, char *out, size_t n)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    snprintf(out, n, "%.*s", (int)(len - start), dir + start);
}

/* --draft DIR: the draft model, computing as the target does, on --draft-device or the
 * target's device (budgeted with the target when they share it), checked against the
 * target for vocabulary, special ids and token strings (sp_spec_check_compat). */
static int load_draft(sp_server *srv, sp_error *err)
{
    const sp_server_config *cfg = &srv->cfg;
    sp_model_params mp = sp_model_default_params();
    mp.n_threads = cfg->n_threads;
    mp.precision = sp_model_precision(srv->model);
    mp.n_ctx = srv->n_ctx;
    char target_dev[64]; /* "cpu" or "cuda:N": the first word of the target's device */
    const char *td = sp_model_device(srv->model);
    snprintf(target_dev, sizeof target_dev, "%.*s", (int)strcspn(td, " "), td);
    mp.device = cfg->draft_device ? cfg->draft_device : target_dev;
    bool same = !strcmp(mp.device, target_dev) ||
                (!strcmp(mp.device, "cuda") && !strcmp(target_dev, "cuda:0"));
    mp.reserved_bytes = same ? sp_model_budget_bytes(srv->model, srv->n_ctx) : 0;
    if (sp_model_open(cfg->draft, &mp, &srv->draft_model, err) != SP_OK)
        return 1;
    sp_tokenizer *dt = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", cfg->draft);
    if (access(path, R_OK) == 0 && sp_tokenizer_open(cfg->draft, &dt, err) != SP_OK)
        return 1;
    sp_status st = sp_spec_check_compat(srv->model, srv->draft_model, srv->tok, dt, err);
    sp_tokenizer_close(dt);
    if (st != SP_OK)
        return 1;
    fprintf(stderr, "specula serve: draft %s on %s\n", cfg->draft, sp_model_device(srv->draft_model));
    return 0;
}

static int load(sp_server *srv, sp_error *err)
{
    const sp_server_config *cfg = &srv->cfg;
    if (sp_tokenizer_open(cfg->model_dir, &srv->tok, err) != SP_OK)
        return 1;
    sp_error cerr = {0};
    if (sp_chat_open(cfg->model_dir, &srv->chat, &cerr) != SP_OK) {
        fprintf(stderr, "specula serve: no chat template (%s): /v1/chat/completions answers 400\n",
                cerr.msg);
        srv->chat = NULL;
    }
    sp_model_params mp = sp_model_default_params();
    mp.n_threads = cfg->n_threads;
    mp.device = cfg->device;
    mp.precision = cfg->precision;
    mp.n_ctx = cfg->n_ctx; /* the check budgets one session; the pool is --parallel of them */
    if (sp_model_open(cfg->model_dir, &mp, &srv->model, err) != SP_OK)
        return 1;
    fprintf(stderr, "specula serve: %s on %s\n", cfg->model_dir, sp_model_device(srv->model));
    int64_t max = sp_model_n_ctx_max(srv->model);
    srv->n_ctx = cfg->n_ctx > 0 ? cfg->n_ctx : (max < 4096 ? max : 4096);
    if (srv->n_ctx > max) {
        snprintf(err->msg, sizeof err->msg, "--ctx %lld exceeds the model's maximum of %lld",
                 (long long)srv->n_ctx, (long long)max);
        return 1;
    }
    srv->defaults = sp_model_sampling_defaults(srv->model);
    bool ngram = cfg->draft && !strcmp(cfg->draft, "ngram");
    if (cfg->draft && !ngram && load_draft(srv, err) != 0)
        return 1;
    sp_sched_config sc = {
        .model = srv->model, .tok = srv->tok, .text_mu = &srv->text_mu, .metrics = srv->metrics,
        .n_parallel = cfg->n_parallel, .n_queue = cfg->n_queue, .n_ctx = srv->n_ctx,
        .prefill_chunk = 256, .ngram = ngram, .draft_model = srv->draft_model,
        .draft_p_min = cfg->draft_p_min, .draft_k = cfg->draft_k,
        .ngram_min = 1, .ngram_max = 3,
    };
    if (sp_sched_new(&sc, &srv->sched, err) != SP_OK)
        return 1;
    return 0;
}

int sp_server_run(const sp_server_config *cfg)
{
    sp_server srv;
    memset(&srv, 0, sizeof srv);
    srv.cfg = *cfg;
    srv.created = (int64_t)time(NULL);
    atomic_init(&srv.ready, false);
    atomic_init(&srv.next_id, (uint64_t)time(NULL) << 20);
    atomic_init(&srv.n_active, 0);
    model_name(cfg->model_dir, srv.model_id, sizeof srv.model_id);
    pthread_mutex_init(&srv.text_mu, NULL);
    int rc = 1;
    sp_error err = {0};

    signal(SIGPIPE, SIG_IGN);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    if (!(srv.metrics = sp_metrics_new())) {
        fprintf(stderr, "specula serve: out of memory\n");
        goto done;
    }
    if (!sp_http_start(&srv, &err)) {
        fprintf(stderr, "specula serve: %s\n", err.msg);
        goto done;
    }
    fprintf(stderr, "specula serve: loading %s (port %d answers 503 until ready)\n", cfg->model_dir,
            srv.port);
    if (load(&srv, &err) != 0) {
        fprintf(stderr, "specula serve: %s\n", err.msg);
        goto done;
    }
    atomic_store(&srv.ready, true);
    bool v6 = strchr(cfg->host, ':') != NULL;
    fprintf(stderr, "specula serve: %s, context %lld x %d sequences, queue %d%s\n", srv.model_id,
            (long long)srv.n_ctx, cfg->n_parallel, cfg->n_queue,
            !cfg->draft ? "" : srv.draft_model ? ", drafts from the draft model" : ", n-gram drafts");
    fprintf(stderr, "listening on http://%s%s%s:%d\n", v6 ? "[" : "", cfg->host, v6 ? "]" : "",
            srv.port);
    fflush(stderr);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "specula serve: %s: draining (up to %d ms), then exiting\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT", cfg->grace_ms);
    sp_http_quiesce(&srv);
    sp_sched_drain(srv.sched, cfg->grace_ms);
    sp_http_wait_idle(&srv, 5000); /* the last answers reach their clients */
    rc = 0;
done:
    sp_http_stop(&srv); /* waits for the connection threads */
    sp_sched_free(srv.sched);
    sp_model_close(srv.draft_model);
    sp_model_close(srv.model);
    sp_chat_close(srv.chat);
    sp_tokenizer_close(srv.tok);
    sp_metrics_free(srv.metrics);
    pthread_mutex_destroy(&srv.text_mu);
    return rc;
}
