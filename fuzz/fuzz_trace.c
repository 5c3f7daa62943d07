/* fuzz_trace.c: the trace reader of `specula diff` (JSON lines) and the diff itself.
 * The input is split at its first NUL byte into trace A and trace B (B = A when there
 * is none); each is read, and when both read, they are diffed exactly and with a
 * tolerance. Property: a clean error naming the trace, or a diff; never a crash, a leak,
 * or undefined behaviour (UBSan: float-to-int casts of out-of-range numbers). */
#include "diag/trace_diff.h"
#include "util/error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sp_status read_buf(const uint8_t *p, size_t n, const char *name, sp_trace_file *out, sp_error *err)
{
    memset(out, 0, sizeof *out);
    if (n == 0)
        return sp_err(err, SP_ERR_FORMAT, "%s: empty", name);
    FILE *f = fmemopen((void *)p, n, "r");
    if (!f)
        return sp_err(err, SP_ERR_IO, "%s: fmemopen", name);
    sp_status st = sp_trace_read_stream(f, name, out, err);
    fclose(f);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t na = nul ? (size_t)(nul - data) : size;
    const uint8_t *b = nul ? nul + 1 : data;
    size_t nb = nul ? size - na - 1 : size;
    sp_trace_file ta, tb;
    sp_error err = {0};
    if (read_buf(data, na, "a.jsonl", &ta, &err) != SP_OK) {
        if (!strstr(err.msg, "a.jsonl"))
            abort();
        return 0;
    }
    if (read_buf(b, nb, "b.jsonl", &tb, &err) == SP_OK) {
        double tols[] = {0.0, 1e-3};
        for (int i = 0; i < 2; i++) {
            sp_trace_diff d;
            if (sp_trace_diff_run(&ta, &tb, tols[i], &d, &err) == SP_OK) {
                if (d.found && (d.first.ia >= ta.n || d.first.ib >= tb.n))
                    abort();
                for (size_t g = 0; g < d.n_growth; g++)
                    if (d.growth[g].ia >= ta.n || d.growth[g].ib >= tb.n)
                        abort();
                sp_trace_diff_free(&d);
            }
        }
        sp_trace_file_free(&tb);
    }
    sp_trace_file_free(&ta);
    return 0;
}
