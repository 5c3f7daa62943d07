/* cuda_upload.c: large host-to-device copies through two pinned staging buffers.
 *
 * A cudaMemcpy from pageable memory (the checkpoint's mapping) is staged by the driver on
 * one thread: 5-6 GB/s on an H100 host, a third of what PCIe carries. Here the source is
 * cut into pieces of STAGE_BYTES; the threads of a pool copy a piece into one pinned
 * buffer while the DMA engine reads the other (an event per buffer says when it may be
 * refilled). Page-locking the mapping itself instead (cudaHostRegister) was slower: the
 * pinning cost more than the DMA saved. */
#ifdef SPECULA_HAVE_CUDA
#include "backend/cuda_upload.h"
#include "kernels/cuda/cuda_ops.h"
#include "util/threadpool.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define STAGE_BYTES ((size_t)64 << 20)
#define COPY_GRAIN ((int64_t)1 << 20) /* bytes per memcpy task */
#define MAX_COPY_THREADS 8

struct sp_cuda_stager {
    void *buf[2];
    void *done[2]; /* recorded after the DMA out of buf[i] */
    bool busy[2];
    sp_pool *pool;
};

void sp_cuda_stager_free(sp_cuda_stager *s)
{
    if (!s)
        return;
    for (int i = 0; i < 2; i++) {
        if (s->busy[i])
            spc_event_sync(s->done[i]);
        spc_event_free(s->done[i]);
        spc_host_free(s->buf[i]);
    }
    sp_pool_free(s->pool);
    free(s);
}

sp_cuda_stager *sp_cuda_stager_new(void)
{
    sp_cuda_stager *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    int threads = sp_cpu_count() < MAX_COPY_THREADS ? sp_cpu_count() : MAX_COPY_THREADS;
    bool ok = sp_pool_new(threads, &s->pool, NULL) == SP_OK;
    for (int i = 0; i < 2 && ok; i++)
        ok = !spc_host_alloc(&s->buf[i], STAGE_BYTES) && !spc_event_new(&s->done[i]);
    if (!ok) {
        sp_cuda_stager_free(s);
        return NULL;
    }
    return s;
}

typedef struct copy_job {
    unsigned char *to;
    const unsigned char *from;
} copy_job;

static void copy_task(void *ctx, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const copy_job *j = ctx;
    memcpy(j->to + b, j->from + b, (size_t)(e - b));
}

int sp_cuda_staged_upload(sp_cuda_stager *s, void *stream, void *dst, const void *src, size_t n)
{
    int rc = 0;
    for (size_t off = 0, k = 0; off < n && !rc; off += STAGE_BYTES, k++) {
        const size_t len = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
        const int b = (int)(k & 1);
        if (s->busy[b] && (rc = spc_event_sync(s->done[b])) != 0)
            break;
        s->busy[b] = false;
        copy_job j = {s->buf[b], (const unsigned char *)src + off};
        sp_pool_run(s->pool, (int64_t)len, COPY_GRAIN, copy_task, &j);
        rc = spc_memcpy_h2d(stream, (unsigned char *)dst + off, s->buf[b], len);
        if (!rc)
            rc = spc_event_record(s->done[b], stream);
        s->busy[b] = !rc;
    }
    int wait = spc_stream_sync(stream);
    s->busy[0] = s->busy[1] = false;
    return rc ? rc : wait;
}

#endif /* SPECULA_HAVE_CUDA */
