/* backend_cpu.h: the CPU backend (backend_cpu.c) and its expert block (moe_cpu.c). */
#ifndef SP_BACKEND_BACKEND_CPU_H
#define SP_BACKEND_BACKEND_CPU_H

#include "backend/backend.h"
#include "util/threadpool.h"

sp_status sp_cpu_backend_new(int n_threads, sp_backend **out, sp_error *err);
/* The backend's worker pool (its kernels run on it). */
sp_pool *sp_cpu_backend_pool(sp_backend *be);
/* moe_ffn on the CPU: tokens grouped by expert, one batched matmul per expert. */
void sp_cpu_moe_ffn(sp_backend *be, const sp_moe_args *a);

#endif
