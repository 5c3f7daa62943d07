/* cp_async.cuh: the asynchronous global -> shared copies (cp.async, sm_80+) the CUDA
 * kernels stage data with (cuda_tc.cu's GEMM pipeline, cuda_attention.cu's key/value
 * chunks): a 16-byte copy, with or without zero fill, committing the thread's copies as a
 * group and waiting for all but the newest N groups. Both addresses 16-byte aligned;
 * the copies bypass L1 (.cg). Also the L2 policy of weights that stream through once a
 * decode step (evict first), for these copies and decode.cuh's loads. */
#ifndef SP_KERNELS_CUDA_CP_ASYNC_CUH
#define SP_KERNELS_CUDA_CP_ASYNC_CUH

#include <stdint.h>

/* 16 bytes from gmem to smem. */
static __device__ __forceinline__ void spc_cp16(void *smem, const void *gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

/* 16 bytes from gmem to smem when ok, else 16 zero bytes to smem (gmem not read). */
static __device__ __forceinline__ void spc_cp16_or_zero(void *smem, const void *gmem, bool ok)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = ok ? 16 : 0; /* source bytes; the rest of the 16 is filled with zeros */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n)
                 : "memory");
}

/* ---- weights that stream through once a step ---------------------------------------
 * A decode step reads every weight once, about 1.3-13 GB, through an L2 of 50-60 MB: left
 * to the default policy they evict what the step reads again (the KV cache, activations,
 * norm weights, the kernels' code). The exact products (decode.cuh, spc_load16) and the
 * fast BF16 rows kernel's edge items (cuda_tc.cu; its whole items go without the hint,
 * which ptxas 13.0 mis-encoded there) load them evict-first: H200, prompt 512, decode
 * llama-1b exact 1,110 -> 1,144 tok/s (prefill 4.10k -> 4.41k), fast 929 -> 939,
 * gpt-oss-20b shape exact 308 -> 328. Not the MXFP4 expert rows of fast precision
 * (moe_fp4_mma.cuh): decode unchanged, its grouped prefill 4% slower (blocks of one expert
 * share its weights in L2). */
static __device__ __forceinline__ uint64_t spc_l2_evict_first(void)
{
    uint64_t p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}

/* spc_cp16_or_zero for a weight streamed through once: L2 evict-first. (A source size
 * together with a cache hint is an illegal instruction on an H200: the zero fill takes the
 * plain form.) */
static __device__ __forceinline__ void spc_cp16_or_zero_stream(void *smem, const void *gmem, bool ok)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    if (ok) {
        asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(s),
                     "l"(gmem), "l"(spc_l2_evict_first())
                     : "memory");
    } else {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, 0;" ::"r"(s), "l"(gmem) : "memory");
    }
}

/* The thread's copies issued since the last commit become one group. */
static __device__ __forceinline__ void spc_cp_commit(void)
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* Waits until at most N of the thread's groups are still in flight (the newest ones). */
template <int N> static __device__ __forceinline__ void spc_cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#endif
