/* rope.h: rotary-embedding frequencies for the RoPE variants of transformers
 * (default, linear, llama3, yarn), computed in float32 with the same operation order as
 * transformers' modeling_rope_utils so positions rotate by the same angles. */
#ifndef SP_MODEL_ROPE_H
#define SP_MODEL_ROPE_H

#include "format/hf_config.h"

typedef struct sp_rope {
    int64_t dim;            /* rotated dims per head (even) */
    float inv_freq[1024];   /* [dim/2] */
    float attention_factor; /* multiplies cos and sin */
} sp_rope;

/* max_pos is config.max_position_embeddings (yarn defaults depend on it). */
sp_status sp_rope_init(sp_rope *r, const sp_rope_config *cfg, int64_t rot_dim, int64_t max_pos,
                       const char *what, sp_error *err);

/* Writes [dim/2] cos then [dim/2] sin for position pos into out. */
void sp_rope_cos_sin(const sp_rope *r, int64_t pos, float *out);

/* transformers' yarn get_mscale(scale, mscale) = 0.1*mscale*ln(scale) + 1 (1 when scale <= 1). */
double sp_yarn_get_mscale(double scale, double mscale);

#endif
