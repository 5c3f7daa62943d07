/* backend.c: choosing a backend from a device string (see backend.h). */
#include "backend/backend.h"
#include "backend/backend_cpu.h"
#include "util/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef SPECULA_HAVE_CUDA
#include "backend/backend_cuda.h"
#endif

int sp_backend_cuda_devices(void)
{
#ifdef SPECULA_HAVE_CUDA
    return sp_cuda_backend_devices();
#else
    return 0;
#endif
}

static sp_status open_cuda(int index, sp_backend **out, sp_error *err)
{
#ifdef SPECULA_HAVE_CUDA
    int n = sp_cuda_backend_devices();
    if (n <= 0)
        return sp_err(err, SP_ERR_UNSUPPORTED, "--device cuda:%d: no usable CUDA device (%s)", index,
                      sp_cuda_backend_why_none());
    if (index >= n)
        return sp_err(err, SP_ERR_INVALID_ARG,
                      "--device cuda:%d: no such device (this machine has %d CUDA device%s: 0..%d)",
                      index, n, n == 1 ? "" : "s", n - 1);
    return sp_cuda_backend_new(index, out, err);
#else
    (void)out;
    return sp_err(err, SP_ERR_UNSUPPORTED,
                  "--device cuda:%d: this build of specula has no CUDA backend (built without nvcc; "
                  "configure with -DSPECULA_CUDA=ON)", index);
#endif
}

sp_status sp_backend_open(const char *device, int n_threads, sp_backend **out, sp_error *err)
{
    *out = NULL;
    if (!device || !*device || !strcmp(device, "auto")) {
        if (sp_backend_cuda_devices() > 0)
            return open_cuda(0, out, err);
        return sp_cpu_backend_new(n_threads, out, err);
    }
    if (!strcmp(device, "cpu"))
        return sp_cpu_backend_new(n_threads, out, err);
    if (!strcmp(device, "cuda"))
        return open_cuda(0, out, err);
    if (!strncmp(device, "cuda:", 5)) {
        char *end;
        errno = 0;
        long idx = strtol(device + 5, &end, 10);
        if (end == device + 5 || *end || errno || idx < 0 || idx > 1023)
            return sp_err(err, SP_ERR_INVALID_ARG,
                          "--device '%s': expected cpu, cuda, cuda:N or auto", device);
        return open_cuda((int)idx, out, err);
    }
    return sp_err(err, SP_ERR_INVALID_ARG, "--device '%s': expected cpu, cuda, cuda:N or auto",
                  device);
}

void sp_backend_close(sp_backend *be)
{
    if (be)
        be->ops->destroy(be);
}
