/* moe_route.h: choosing a token's experts and their weights from its router logits.
 *
 * A pure per-token function: the result depends only on that token's logits, never on
 * the batch, so routing is batch-invariant by construction. Ties between equal scores go
 * to the lower expert index. Families:
 *   SOFTMAX_TOPK   p = softmax(logits) over all experts (fp32), top-k of p, renormalized to
 *                  sum 1 when `norm` (Qwen3-MoE: config norm_topk_prob; Mixtral: always)
 *   TOPK_SOFTMAX   top-k of the (biased) logits, softmax over those k (gpt-oss)
 *   SIGMOID_GROUP  s = sigmoid(logits); choice = s + score_bias; groups ranked by the sum
 *                  of their two best choices, the best topk_group groups kept, top-k of
 *                  choice among them; weights are s (without the bias), divided by
 *                  sum + 1e-20 when `norm`, times `scaling` (DeepSeek-V3)
 *   DSV4           s = score(logits) (sqrt(softplus) or sigmoid), top-k of s + score_bias,
 *                  weights s / (sum + 1e-20) * scaling (transformers' V4 router always
 *                  renormalizes)
 *   HASH           DeepSeek-V4 hash layers: ids are given (the caller fills them from the
 *                  token's tid2eid row), weights as DSV4 */
#ifndef SP_MODEL_MOE_ROUTE_H
#define SP_MODEL_MOE_ROUTE_H

#include "model/arch.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sp_route_cfg {
    sp_moe_kind kind;
    int64_t n_experts, top_k;
    bool norm;
    int64_t n_group, topk_group; /* SIGMOID_GROUP */
    float scaling;               /* SIGMOID_GROUP: routed_scaling_factor */
    const float *score_bias;     /* SIGMOID_GROUP, DSV4: e_score_correction_bias [E] */
    bool sqrt_softplus;          /* DSV4, HASH: score function (else sigmoid) */
} sp_route_cfg;

/* logits [E] -> ids [k] (best first; HASH: read, not written) and weights [k];
 * scratch: 2 * E floats. */
void sp_moe_route(const sp_route_cfg *c, const float *logits, int32_t *ids, float *w,
                  float *scratch);

#endif
