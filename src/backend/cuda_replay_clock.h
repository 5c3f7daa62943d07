/* cuda_replay_clock.h: the GPU's own timing of recorded passes, for finding where a decode
 * step's time goes (SPECULA_CUDA_REPLAY_TIMES=1). Timestamped events around every graph
 * replay give, on the GPU's clock, how long each replayed pass ran and how long the GPU
 * had nothing of ours between the end of one replay and the start of the next: the host's
 * turnaround (reading the picks back, uploading the next inputs, launching), plus whatever
 * small copies or launches ran outside the graphs. The medians go to stderr when the
 * backend is destroyed. */
#ifndef SP_BACKEND_CUDA_REPLAY_CLOCK_H
#define SP_BACKEND_CUDA_REPLAY_CLOCK_H

typedef struct sp_replay_clock sp_replay_clock;

/* NULL when out of memory or events (the backend makes one for SPECULA_CUDA_REPLAY_TIMES=1). */
sp_replay_clock *sp_replay_clock_new(void);
/* Around one replay on `stream`; both do nothing for NULL. */
void sp_replay_clock_before(sp_replay_clock *c, void *stream);
void sp_replay_clock_after(sp_replay_clock *c, void *stream);
/* Prints the medians (after the stream has drained) and frees; NULL ok. */
void sp_replay_clock_free(sp_replay_clock *c);

#endif
