/* trace_writer.h: writing every op output of every forward pass of a session as JSON
 * lines (specula trace). One line per (pass, layer, op, position):
 *   {"model": "target", "pass": 3, "layer": 0, "op": "attn_q", "position": 17, "token": 42,
 *    "width": 512, "mean": ..., "std": ..., "min": ..., "max": ..., "amax": ..., "l2": ...,
 *    "nan": 0, "inf": 0, "hash": "9c1f...", "ctx": "77a0..."}
 * "ctx" hashes the tokens at positions 0..position as this pass saw them, so records of
 * two runs computed on the same context can be matched even when the runs evaluated
 * positions differently (prefill vs decode, speculative drafts that were rejected).
 * Layers are numbered as in the checkpoint's tensor names; model-level ops (embed,
 * final_norm, logits) have layer -1. A pass is one forward chunk. Several writers (a
 * target and its draft) may share a FILE: lines appear in execution order.
 *
 * For demonstrations and tests a writer can plant a perturbation: one op's output at
 * one layer is multiplied by a factor before later ops read it (through the session's
 * fault-injection hook, sp_session_set_perturb; the observer itself only reads). */
#ifndef SP_DIAG_TRACE_WRITER_H
#define SP_DIAG_TRACE_WRITER_H

#include "runtime/session.h"

#include <stdio.h>

/* sp_trace_writer_new, _free, _attach, _lines and _failed are public (specula.h), as is
 * sp_trace_writer_set_perturb, which takes the op by name. */

/* Multiplies the output of `op` at `layer` (every position) by factor, in the sessions
 * this writer observes (the first four attached). */
void sp_trace_writer_perturb(sp_trace_writer *w, int layer, sp_op op, float factor);

#endif
