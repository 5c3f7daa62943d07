/* error.c: formatted error messages for sp_error (see error.h). */
#include "util/error.h"
#include "util/assert.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sp_status sp_err(sp_error *err, sp_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

void sp_err_prefix(sp_error *err, const char *fmt, ...)
{
    if (!err)
        return;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[SP_ERROR_MSG_BYTES];
    memcpy(old, err->msg, sizeof old);
    old[sizeof old - 1] = '\0';
    snprintf(err->msg, sizeof err->msg, "%.500s: %.500s", prefix, old);
}

void sp_err_clear(sp_error *err)
{
    if (err) {
        err->status = SP_OK;
        err->msg[0] = '\0';
    }
}

const char *sp_status_name(sp_status status)
{
    switch (status) {
    case SP_OK: return "ok";
    case SP_ERR_IO: return "I/O error";
    case SP_ERR_FORMAT: return "format error";
    case SP_ERR_UNSUPPORTED: return "unsupported";
    case SP_ERR_INVALID_ARG: return "invalid argument";
    case SP_ERR_NOMEM: return "out of memory";
    case SP_ERR_LIMIT: return "limit exceeded";
    case SP_ERR_TEMPLATE: return "template error";
    case SP_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

/* SP_ASSERT's failure path (util/assert.h): an internal invariant broke, a bug. */
void sp_assert_fail(const char *cond, const char *file, int line, const char *func)
{
    fprintf(stderr, "specula: internal error: assertion '%s' failed at %s:%d (%s); this is a bug\n", cond,
            file, line, func);
    fflush(stderr);
    abort();
}
