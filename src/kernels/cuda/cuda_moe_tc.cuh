/* cuda_moe_tc.cuh: the MXFP4 expert rows on tensor cores, as cuda_moe.cu launches them in
 * fast precision: few tokens a block (cuda_moe_tc.cu) and gpt-oss's groups of many tokens
 * (cuda_moe_tc_gemm.cu). Internal to the CUDA kernels. */
#ifndef SP_KERNELS_CUDA_MOE_TC_CUH
#define SP_KERNELS_CUDA_MOE_TC_CUH

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/moe_route_warp.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

#define SPC_MOE_TC_TOK 8                /* tokens a block at most: one n8 tile */
#define SPC_MOE_TC_XS_MAX (96 * 1024)   /* their BF16 x in shared memory, at most */

/* One stage (0 gate or gpt-oss gate_up, 1 up, 2 down) of the row-major MXFP4 experts:
 * y[out row] = bias + expert's stage matrix . bf16(x row), cols = the stage's input size.
 * Pairs (gi NULL): block row p is pair p (expert ids[p], x row p / x_div, output row p).
 * Groups (gi from k_moe_group, P pairs): block row g is group g (expert, first, count):
 * x rows first.., output rows first.. or, with scatter, order[first..]. */
struct spc_moe_tc_job {
    const spc_expert *experts;
    int64_t n_experts;
    int stage;
    bool gptoss;
    const float *x;
    int64_t x_div, x_stride;
    const int32_t *ids;
    const int32_t *gi;
    int64_t P;
    bool scatter;
    int64_t n_out, cols;
    float *y;
    /* glu (stage 0 of gpt-oss): y gets n_out / 2 outputs a token, the activation of each
     * (gate, up) row pair (spc_glu_oss), not the rows themselves */
    bool glu;
    float alpha, limit;
    /* pairs only (gi NULL): with route.logits, each block routes its pair's token itself
     * (moe_route_warp.cuh) instead of reading ids, and the blocks x = 0 store the ids and
     * weights for the stages after */
    spc_route_in route;
    /* uniform: the block computes its expert's matrix from the id (no read of the table) */
    spc_expert_steps steps;
};

/* Tokens a group may hold for inputs of `cols` (0: they do not fit shared memory). */
int spc_moe_tc_group_tokens(int64_t cols);

/* Launches one stage over blocks_y pairs or groups (cols a multiple of 32). */
int spc_moe_tc_rows(cudaStream_t s, const spc_moe_tc_job &j, int64_t blocks_y);

/* The kernel's shared-memory limit, once per device outside graph capture (spc_tc_supported). */
bool spc_moe_tc_setup(void);

/* ---- groups of many tokens (cuda_moe_tc_gemm.cu) ------------------------------------- */

#define SPC_MOE_TC_GEMM_TOK 32 /* pairs a group at most: four n8 tiles */

/* One stage over groups of up to SPC_MOE_TC_GEMM_TOK pairs (gi from k_moe_group, P pairs;
 * block row g is group g: expert, first sorted slot, count), with the same bits as
 * spc_moe_tc_rows: the inputs are rows `first..` of xb, cols BF16 a row in moe_fp4_mma.cuh's
 * pair order (spc_moe_tc_pack_x; cols a multiple of 32, xb 16-byte aligned). Outputs:
 * glu (stage 0 of gpt-oss): gpt-oss's activation of each (gate, up) row pair as BF16 pairs
 * to yb (sorted rows of n_out / 2 columns, ready as the next stage's xb); else fp32 rows of
 * n_out to y, row `first + t` or, with scatter, order[first + t]. */
struct spc_moe_tc_gemm_job {
    const spc_expert *experts;
    int64_t n_experts;
    int stage;
    bool gptoss;
    const unsigned char *xb;
    const int32_t *gi;
    int64_t P;
    bool scatter;
    int64_t n_out, cols;
    float *y;
    bool glu;
    float alpha, limit;
    unsigned char *yb;
};

int spc_moe_tc_gemm(cudaStream_t s, const spc_moe_tc_gemm_job &j, int64_t blocks_y);

/* xb[slot] = row (order ? order[slot] / div : slot) of x ([.., H] floats, H a multiple of
 * 32) as BF16 pairs (x's rounding in the expert kernels), for slots 0 .. P - 1. */
int spc_moe_tc_pack_x(cudaStream_t s, const float *x, const int32_t *order, int64_t P, int64_t div,
                      int64_t H, unsigned char *xb);

/* The GEMM's shared-memory limit (spc_moe_tc_setup calls it). */
bool spc_moe_tc_gemm_setup(void);

#endif
