/* rope.c: RoPE frequencies (see rope.h). Float casts mirror the float32 tensor math of
 * transformers, e.g. inv_freq = 1 / base ** (arange(0, d, 2).float() / d). */
#include "model/rope.h"
#include "util/error.h"

#include <math.h>

double sp_yarn_get_mscale(double scale, double mscale)
{
    if (scale <= 1.0)
        return 1.0;
    return 0.1 * mscale * log(scale) + 1.0;
}

static float pos_freq(double base, int64_t i, int64_t d)
{
    float e = (float)(2 * i) / (float)d;
    return powf((float)base, e);
}

static void init_llama3(sp_rope *r, const sp_rope_config *c)
{
    const double PI = 3.14159265358979323846;
    float factor = (float)c->factor, lo = (float)c->low_freq_factor,
          hi = (float)c->high_freq_factor;
    float old = (float)c->original_max_pos;
    float low_wavelen = old / lo, high_wavelen = old / hi;
    for (int64_t i = 0; i < r->dim / 2; i++) {
        float inv = r->inv_freq[i];
        float wavelen = (float)(2 * PI) / inv;
        float scaled = wavelen > low_wavelen ? inv / factor : inv;
        float smooth = (old / wavelen - lo) / (hi - lo);
        float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
        bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        r->inv_freq[i] = medium ? smoothed : scaled;
    }
}

static sp_status init_yarn(sp_rope *r, const sp_rope_config *c, int64_t max_pos,
                           const char *what, sp_error *err)
{
    const double PI = 3.14159265358979323846;
    int64_t d = r->dim;
    double base = c->theta;
    double orig = c->original_max_pos > 0 ? (double)c->original_max_pos : (double)max_pos;
    double factor = isnan(c->factor) ? (double)max_pos / orig : c->factor;
    if (!(factor > 0))
        return sp_err(err, SP_ERR_FORMAT, "%s: yarn RoPE factor must be positive", what);
    if (c->has_attention_factor)
        r->attention_factor = (float)c->attention_factor;
    else if (c->mscale != 0 && c->mscale_all_dim != 0)
        r->attention_factor = (float)(sp_yarn_get_mscale(factor, c->mscale) /
                                      sp_yarn_get_mscale(factor, c->mscale_all_dim));
    else
        r->attention_factor = (float)sp_yarn_get_mscale(factor, 1.0);
    double lo = d * log(orig / (c->beta_fast * 2 * PI)) / (2 * log(base));
    double hi = d * log(orig / (c->beta_slow * 2 * PI)) / (2 * log(base));
    if (c->truncate) {
        lo = floor(lo);
        hi = ceil(hi);
    }
    if (lo < 0)
        lo = 0;
    if (hi > d - 1)
        hi = (double)(d - 1);
    if (lo == hi)
        hi += 0.001;
    for (int64_t i = 0; i < d / 2; i++) {
        float pf = pos_freq(base, i, d);
        float extra = 1.0f / pf;
        float inter = 1.0f / ((float)factor * pf);
        float ramp = ((float)i - (float)lo) / (float)(hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float ext_factor = 1.0f - ramp;
        r->inv_freq[i] = inter * (1.0f - ext_factor) + extra * ext_factor;
    }
    return SP_OK;
}

sp_status sp_rope_init(sp_rope *r, const sp_rope_config *c, int64_t rot_dim, int64_t max_pos,
                       const char *what, sp_error *err)
{
    if (rot_dim <= 0 || rot_dim % 2 || rot_dim > 2048)
        return sp_err(err, SP_ERR_UNSUPPORTED,
                      "%s: rotary dimension %lld must be even and at most 2048", what,
                      (long long)rot_dim);
    r->dim = rot_dim;
    r->attention_factor = 1.0f;
    for (int64_t i = 0; i < rot_dim / 2; i++)
        r->inv_freq[i] = 1.0f / pos_freq(c->theta, i, rot_dim);
    switch (c->type) {
    case SP_ROPE_DEFAULT: break;
    case SP_ROPE_LINEAR:
        for (int64_t i = 0; i < rot_dim / 2; i++)
            r->inv_freq[i] /= (float)c->factor;
        break;
    case SP_ROPE_LLAMA3: init_llama3(r, c); break;
    case SP_ROPE_YARN: return init_yarn(r, c, max_pos, what, err);
    }
    return SP_OK;
}

void sp_rope_cos_sin(const sp_rope *r, int64_t pos, float *out)
{
    int64_t h = r->dim / 2;
    for (int64_t i = 0; i < h; i++) {
        float ang = r->inv_freq[i] * (float)pos;
        out[i] = cosf(ang) * r->attention_factor;
        out[h + i] = sinf(ang) * r->attention_factor;
    }
}
