/* forward_mla.c: multi-head latent attention (DeepSeek). */
#include "model/forward_internal.h"

void sp_forward_mla(sp_session *s, int64_t l, int64_t n)
{
    (void)s;
    (void)l;
    (void)n;
}
