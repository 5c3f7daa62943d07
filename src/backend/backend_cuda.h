/* backend_cuda.h: the CUDA backend (backend_cuda.c), built when SPECULA_HAVE_CUDA. */
#ifndef SP_BACKEND_BACKEND_CUDA_H
#define SP_BACKEND_BACKEND_CUDA_H

#include "backend/backend.h"

/* Usable devices (0 without a driver or GPU), and why there is none. */
int sp_cuda_backend_devices(void);
const char *sp_cuda_backend_why_none(void);
sp_status sp_cuda_backend_new(int index, sp_backend **out, sp_error *err);

#endif
