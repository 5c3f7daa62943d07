/* server.h: `specula serve`, an OpenAI-compatible HTTP server over the public API.
 *
 * Rooms: http.c (libmicrohttpd, routing, auth, body limits, handlers), openai_request.c
 * (request bodies), openai_response.c (response objects, SSE chunks, errors),
 * chat_output.c (reasoning and tool calls), scheduler.c (continuous batching: the one
 * thread that touches the models), drafts.c (n-gram and draft-model drafts for the
 * batch), metrics.c (Prometheus text). server.c loads the model
 * and runs the lifecycle (listen, load, serve, drain on SIGTERM). */
#ifndef SP_SERVER_SERVER_H
#define SP_SERVER_SERVER_H

#include "metrics.h"
#include "scheduler.h"
#include "specula.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sp_server_config {
    const char *model_dir;
    const char *draft;   /* NULL, "ngram", or a draft model directory */
    const char *draft_device; /* the draft model's device; NULL: the target's */
    float draft_p_min;   /* end a model draft under this draft probability (0: off) */
    const char *host;    /* default 127.0.0.1 */
    int port;            /* 0: any free port (printed) */
    int n_parallel;      /* sequences decoded together (sessions in the pool) */
    int n_queue;         /* requests waiting beyond those */
    int64_t n_ctx;       /* context per sequence; 0 = min(model maximum, 4096) */
    const char *api_key; /* NULL: no authentication */
    size_t max_body_bytes;
    int n_threads;
    const char *device;   /* "cpu", "cuda[:N]", "auto"/NULL (sp_model_params.device) */
    sp_precision precision; /* the CPU kernels' arithmetic (sp_model_params.precision) */
    int draft_k;
    int grace_ms;        /* SIGTERM: how long running requests may finish */
} sp_server_config;

typedef struct sp_server {
    sp_server_config cfg;
    struct MHD_Daemon *mhd;
    int port;
    atomic_bool ready;
    sp_model *model;
    sp_model *draft_model; /* --draft DIR, else NULL */
    sp_tokenizer *tok;
    sp_chat *chat; /* NULL when the model has no chat template */
    pthread_mutex_t text_mu; /* tokenizer and chat template: one user at a time */
    sp_sched *sched;
    sp_metrics *metrics;
    int64_t n_ctx;
    char model_id[256];
    sp_sampling_params defaults;
    int64_t created;
    atomic_uint_fast64_t next_id;
    atomic_int n_active; /* generation requests whose response is not fully sent */
} sp_server;

/* Runs the server until SIGTERM / SIGINT; returns the process exit code. */
int sp_server_run(const sp_server_config *cfg);

/* http.c */
bool sp_http_start(sp_server *srv, sp_error *err);
void sp_http_quiesce(sp_server *srv);
/* Waits (up to timeout_ms) until every generation response has been sent. */
void sp_http_wait_idle(sp_server *srv, int timeout_ms);
void sp_http_stop(sp_server *srv);

#endif
