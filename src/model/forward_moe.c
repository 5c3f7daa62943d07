/* forward_moe.c: mixture-of-experts feed-forward blocks. */
#include "model/forward_internal.h"

void sp_forward_moe(sp_session *s, int64_t l, int64_t n)
{
    (void)s;
    (void)l;
    (void)n;
}
