/* cuda_upload.h: large host-to-device copies (the weights, at load) through two pinned
 * staging buffers filled by several threads (see cuda_upload.c). CUDA builds only. */
#ifndef SP_BACKEND_CUDA_UPLOAD_H
#define SP_BACKEND_CUDA_UPLOAD_H

#include <stddef.h>

typedef struct sp_cuda_stager sp_cuda_stager;

/* NULL when pinned memory, events or threads cannot be had (copy the plain way then). */
sp_cuda_stager *sp_cuda_stager_new(void);
void sp_cuda_stager_free(sp_cuda_stager *s);

/* Copies n bytes from host src to device dst on stream and waits for them: returns a
 * cudaError_t (0 on success). The bytes that arrive are src's, as with cudaMemcpy. */
int sp_cuda_staged_upload(sp_cuda_stager *s, void *stream, void *dst, const void *src, size_t n);

#endif
