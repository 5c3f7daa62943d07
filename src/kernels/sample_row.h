/* sample_row.h: the arithmetic of drawing one token from a logits row, shared by the host
 * sampler (runtime/sampler.c) and the CUDA kernel (kernels/cuda/cuda_sample.cu) so both
 * give the same token bit for bit. Compiles as C and as CUDA (host and device).
 *
 * The draw (docs/NUMERICS.md, "Sampling"), warpers in transformers' order:
 *   order      candidates rank by descending logit, ties (and -0 / +0) by ascending id;
 *              NaN logits are never candidates.
 *   top-k      k > 0 and fewer than the candidates: keep logits >= the k-th (ties stay).
 *   weights    w = 1 for the candidates equal to the top logit lmax, else
 *              exp((double)l * inv_t - (double)lmax * inv_t) by sp_sample_exp below (0 below
 *              -700 and for NaN differences); inv_t = 1 / temperature.
 *   sums       sp_sample_lsum's fixed order: lane c (of SP_SAMPLE_LANES) sums ids c, c + L,
 *              ... ascending; a group sums its 32 lanes in order; the total sums the groups
 *              in order (every sum starts from 0.0 and adds one term at a time).
 *   top-p      p < 1: S the sum of the weights, target = p * S; walking the candidates in
 *              rank order and adding each weight, a candidate stays while the sum of those
 *              before it is < target (the first always stays).
 *   min-p      keep w >= min_p (w of the top is 1).
 *   draw       S' the sum of the kept weights, x = u * S' (u uniform in [0, 1)); the group,
 *              then the lane, then the element where the running sum (groups in order from
 *              0.0, then the group's lanes from the sum before the group, then the lane's ids
 *              from the sum before the lane) first exceeds x; where rounding leaves x above
 *              every running sum of a level, that level's last positive term.
 * Temperature 0 is greedy: the first index of the maximum (index 0 when logit 0 is NaN,
 * as sp_argmax's scan).
 *
 * Every operation below is an IEEE double operation in the order written (the build turns
 * contraction into FMAs off, in C and in CUDA), so C and CUDA agree. */
#ifndef SP_KERNELS_SAMPLE_ROW_H
#define SP_KERNELS_SAMPLE_ROW_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SP_SAMPLE_FN static __host__ __device__ __forceinline__
#else
#define SP_SAMPLE_FN static inline
#endif

#define SP_SAMPLE_LANES 1024 /* lanes of the fixed sum order */
#define SP_SAMPLE_GROUP 32   /* lanes a group */
#define SP_SAMPLE_GROUPS (SP_SAMPLE_LANES / SP_SAMPLE_GROUP)
#define SP_SAMPLE_HEAD 2048  /* top-p: candidates the device sorts at most (else the host) */

/* One row's draw. inv_t 0: greedy (the rest unused). */
typedef struct sp_sample_req {
    double u;     /* uniform in [0, 1) */
    double inv_t; /* 1 / temperature */
    float top_p;  /* (0, 1] */
    float min_p;  /* [0, 1] */
    int32_t top_k; /* 0: off */
    int32_t pad;
} sp_sample_req;

/* The candidate order as 32 bits: ascending key = descending logit, -0 as +0, NaN last
 * (UINT32_MAX, never a candidate). */
SP_SAMPLE_FN uint32_t sp_sample_rank(float f)
{
    if (f != f)
        return 0xffffffffu;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (f == 0.0f)
        u = 0u;
    /* negative: ~u, else u with the sign bit set (no branch on the sign) */
    const uint32_t ascending = u ^ ((0u - (u >> 31)) | 0x80000000u);
    return ~ascending;
}

/* The logit of a rank (the inverse of sp_sample_rank for non-NaN keys; -0 comes back +0). */
SP_SAMPLE_FN float sp_sample_unrank(uint32_t r)
{
    const uint32_t ascending = ~r;
    const uint32_t u = (ascending & 0x80000000u) ? (ascending & 0x7fffffffu) : ~ascending;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* exp(z) for -700 < z <= 0: k = z / ln2 rounded to nearest (the 1.5 * 2^52 trick), r = z -
 * k ln2 in two steps (k * LN2_HI is exact: its low 21 bits are zero), a degree-12 Taylor
 * polynomial of r by Horner, times 2^k (exact: the result stays normal). Plain multiplies
 * and adds only, so no processor needs an FMA unit for the same bits; within a few ulp of
 * exp. */
SP_SAMPLE_FN double sp_sample_exp(double z)
{
    const double shifter = 6755399441055744.0; /* 1.5 * 2^52 */
    const double kd = (z * 1.4426950408889634074 + shifter) - shifter;
    const double r = (z - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
    double p = 2.08767569878680989792e-09; /* 1 / 12! */
    p = p * r + 2.50521083854417187751e-08;
    p = p * r + 2.75573192239858906526e-07;
    p = p * r + 2.75573192239858906526e-06;
    p = p * r + 2.48015873015873015873e-05;
    p = p * r + 1.98412698412698412698e-04;
    p = p * r + 1.38888888888888888889e-03;
    p = p * r + 8.33333333333333333333e-03;
    p = p * r + 4.16666666666666666667e-02;
    p = p * r + 1.66666666666666666667e-01;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    const uint64_t bits = (uint64_t)((int64_t)kd + 1023) << 52;
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* A candidate's weight (see the top comment); m = (double)lmax * inv_t. */
SP_SAMPLE_FN double sp_sample_weight(float l, float lmax, double inv_t, double m)
{
    if (l == lmax)
        return 1.0;
    const double z = (double)l * inv_t - m;
    if (!(z > -700.0))
        return 0.0;
    return sp_sample_exp(z);
}

/* Whether candidate (rank, id) is at or before (cut_rank, cut_id) in rank order. */
SP_SAMPLE_FN int sp_sample_before(uint32_t rank, int64_t id, uint32_t cut_rank, int64_t cut_id)
{
    return rank < cut_rank || (rank == cut_rank && id <= cut_id);
}

/* The walk of one level: the first j < n with a[j * stride] > 0 where acc + a[0] + .. +
 * a[j] (added in order) exceeds x, else the last positive one (-1: none). *before receives
 * the running sum before j. */
SP_SAMPLE_FN int64_t sp_sample_walk(const double *a, int64_t n, int64_t stride, double x,
                                    double acc, double *before)
{
    int64_t last = -1;
    double last_before = acc;
    for (int64_t j = 0; j < n; j++) {
        const double v = a[j * stride];
        if (!(v > 0.0))
            continue;
        const double next = acc + v;
        if (x < next) {
            *before = acc;
            return j;
        }
        last = j;
        last_before = acc;
        acc = next;
    }
    *before = last_before;
    return last;
}

/* Speculative verification on a device (the backend's spec_verify op; the host's rule is
 * runtime/spec_verify.c): m <= SP_SPEC_DEV_K drafts, so that the target's m + 1 rows and the
 * draft's m rows fit one launch of the draw kernels. */
#define SP_SPEC_DEV_K 15

/* Its inputs besides the rows and their requests. */
typedef struct sp_spec_args {
    double u[SP_SPEC_DEV_K];      /* draft i's acceptance uniform */
    double v;                     /* the residual's uniform */
    double v_bonus;               /* the bonus token's (every draft accepted) */
    int32_t drafts[SP_SPEC_DEV_K]; /* the draft tokens */
    int32_t m;                    /* how many */
} sp_spec_args;

#endif
