/* metrics.h: the server's counters and latency histograms, written as Prometheus text.
 *
 * Names follow vLLM's (num_requests_running, time_to_first_token_seconds, ...) under the
 * prefix specula_. Every function is thread-safe (one mutex); observations are cheap
 * (a few adds), so the scheduler records them inline. */
#ifndef SP_SERVER_METRICS_H
#define SP_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define SP_METRICS_MAX_POS 64 /* speculative draft positions tracked */

typedef struct sp_metrics sp_metrics;

sp_metrics *sp_metrics_new(void);
void sp_metrics_free(sp_metrics *m);

/* One finished HTTP request with its status code. */
void sp_metrics_request(sp_metrics *m, int status);
void sp_metrics_tokens(sp_metrics *m, int64_t n_prompt, int64_t n_generated);
void sp_metrics_ttft(sp_metrics *m, double seconds);
void sp_metrics_itl(sp_metrics *m, double seconds);
void sp_metrics_e2e(sp_metrics *m, double seconds);
/* One verify round that proposed n_drafted tokens, of which the first n_accepted held. */
void sp_metrics_spec(sp_metrics *m, int n_drafted, int n_accepted);
/* Gauges, set by the scheduler after each step. */
void sp_metrics_gauges(sp_metrics *m, int64_t running, int64_t waiting);

/* The exposition text (malloc'd, NUL-terminated), or NULL when out of memory. */
char *sp_metrics_render(sp_metrics *m, size_t *len);

#endif
