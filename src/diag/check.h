/* check.h: self-tests of a checkpoint (specula check), each a pass / warn / fail with its
 * reason. They target the failures in ../shared/docs/seeds/: non-finite or badly scaled
 * weights, a missing final norm, a hand-rolled prompt instead of the chat template,
 * speculative decoding that diverges or whose draft state is contaminated, and
 * degenerate generation.
 *
 *   weights finite          every weight, quantized ones decoded; the first bad tensor named
 *   fp4 scales              share of block scales saturated at the format's maximum or zero
 *   final norm              logits from the last hidden state X and from X / 100 through the
 *                           final norm + LM head agree (argmax, cosine, magnitude), and equal
 *                           the forward pass's logits
 *   chat template           the template's rendering tokenized beside a naive concatenation
 *   speculative (self)      greedy --draft self equals plain greedy, every draft accepted
 *   speculative (draft)     the same with the given draft
 *   draft isolation         the draft's trace inside speculation equals its standalone trace
 *   degenerate loops        a short greedy generation whose tail repeats a short cycle (warn) */
#ifndef SP_DIAG_CHECK_H
#define SP_DIAG_CHECK_H

#include "specula.h"

/* sp_check_status, sp_check_status_name and sp_check_inputs are public (specula.h); the
 * public sp_check_model wraps sp_check_run (diag_api.c). */

typedef struct sp_check_result {
    char name[48];
    sp_check_status status;
    char detail[1536];
} sp_check_result;

typedef struct sp_check_report {
    sp_check_result *r;
    size_t n, cap;
} sp_check_report;

/* Runs every check. An error status only for failures to run (out of memory). */
sp_status sp_check_run(const sp_check_inputs *in, sp_check_report *rep, sp_error *err);
void sp_check_report_free(sp_check_report *rep);

#endif
