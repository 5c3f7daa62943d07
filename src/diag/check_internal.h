/* check_internal.h: the pieces of specula check split across files (check.c: weights,
 * scales, final norm, loops, driver; check_spec.c: speculative decoding, draft isolation,
 * chat template). */
#ifndef SP_DIAG_CHECK_INTERNAL_H
#define SP_DIAG_CHECK_INTERNAL_H

#include "diag/check.h"

void sp_check_add(sp_check_report *rep, const char *name, sp_check_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

void sp_check_speculative(const sp_check_inputs *in, sp_check_report *rep);
void sp_check_chat_template(const sp_check_inputs *in, sp_check_report *rep);
/* On a GPU: packed matrices decoded there equal the CPU decoder bit for bit. */
void sp_check_device_decode(sp_model *m, const char *label, sp_check_report *rep);

#endif
