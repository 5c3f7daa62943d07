/* assert.h: SP_ASSERT, an always-on check of an internal invariant.
 *
 * For bugs only, never for input: a file, a request or an argument that is wrong is an
 * sp_status with a message (the library never aborts on bad input). SP_ASSERT states what
 * the code itself guarantees (a shape agreed at an op boundary, an index the caller
 * already bounded); when it fails, specula is wrong, so it reports file:line and the
 * condition on stderr and aborts. It stays on in release builds (NDEBUG does not remove
 * it): the checks sit at op boundaries, not in inner loops. */
#ifndef SP_UTIL_ASSERT_H
#define SP_UTIL_ASSERT_H

#include <stdio.h>
#include <stdlib.h>

#if defined(__GNUC__) || defined(__clang__)
#define SP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define SP_UNLIKELY(x) (x)
#endif

void sp_assert_fail(const char *cond, const char *file, int line, const char *func);

#define SP_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (SP_UNLIKELY(!(cond)))                                                                  \
            sp_assert_fail(#cond, __FILE__, __LINE__, __func__);                                   \
    } while (0)

#endif
