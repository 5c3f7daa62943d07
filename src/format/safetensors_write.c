/* safetensors_write.c: safetensors writer (see safetensors_write.h). */
#include "format/safetensors_write.h"
#include "util/error.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *build_header(const sp_st_out *t, size_t n, size_t *len)
{
    /* hand-built: cJSON would reorder nothing but prints doubles for offsets */
    size_t cap = 256 + n * 256, o = 0;
    for (size_t i = 0; i < n; i++)
        cap += strlen(t[i].name) * 2;
    char *h = malloc(cap);
    if (!h)
        return NULL;
    uint64_t off = 0;
    o += (size_t)snprintf(h + o, cap - o, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < n; i++) {
        o += (size_t)snprintf(h + o, cap - o, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name,
                              t[i].dtype);
        for (int d = 0; d < t[i].n_dims; d++)
            o += (size_t)snprintf(h + o, cap - o, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        o += (size_t)snprintf(h + o, cap - o, "],\"data_offsets\":[%llu,%llu]}",
                              (unsigned long long)off, (unsigned long long)(off + t[i].n_bytes));
        off += t[i].n_bytes;
    }
    o += (size_t)snprintf(h + o, cap - o, "}");
    while (o % 8)
        h[o++] = ' ';
    *len = o;
    return h;
}

sp_status sp_safetensors_write(const char *path, const sp_st_out *t, size_t n, sp_error *err)
{
    size_t hlen;
    char *h = build_header(t, n, &hlen);
    if (!h)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h);
        return sp_err(err, SP_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    bool ok = fwrite(lenb, 1, 8, f) == 8 && fwrite(h, 1, hlen, f) == hlen;
    free(h);
    unsigned char *buf = malloc(1 << 20);
    ok = ok && buf;
    for (size_t i = 0; ok && i < n; i++) {
        if (t[i].data) {
            ok = fwrite(t[i].data, 1, t[i].n_bytes, f) == t[i].n_bytes;
            continue;
        }
        for (size_t o = 0; ok && o < t[i].n_bytes; o += 1 << 20) {
            size_t c = t[i].n_bytes - o < (1u << 20) ? t[i].n_bytes - o : (1u << 20);
            t[i].fill(t[i].fill_ctx, buf, o, c);
            ok = fwrite(buf, 1, c, f) == c;
        }
    }
    free(buf);
    if (fclose(f) != 0)
        ok = false;
    return ok ? SP_OK : sp_err(err, SP_ERR_IO, "%s: write failed", path);
}
