/* quant.h: quantized checkpoints — which scheme a checkpoint uses and how its packed
 * tensors become sp_weight views (kept packed; kernels decode them in registers).
 *
 *   scheme                 config                                       tensors per matrix X
 *   MXFP4 (gpt-oss)        quantization_config.quant_method "mxfp4"      experts' *_blocks U8 [.., rows, cols/32, 16]
 *                                                                        + *_scales U8/E8M0 [.., rows, cols/32]
 *   MXFP4 (per matrix)     quant_method "mxfp4"                          X.weight U8/I8 [rows, cols/2], X.weight_scale
 *                                                                        or X.scale U8/E8M0 [rows, cols/32]
 *   NVFP4, ModelOpt        quant_method "modelopt" + quant_algo NVFP4,   X.weight U8 [rows, cols/2], X.weight_scale
 *                          or hf_quant_config.json quantization.quant_algo  F8_E4M3 [rows, cols/16], X.weight_scale_2
 *                                                                        F32 (multiplier), X.input_scale F32
 *   NVFP4, compressed-     quant_method "compressed-tensors", format     X.weight_packed, X.weight_scale,
 *   tensors                "nvfp4-pack-quantized"                        X.weight_global_scale F32 (a divisor)
 *   FP8 blocks (DeepSeek)  quant_method "fp8", weight_block_size [128,128]  X.weight F8_E4M3, X.weight_scale_inv F32
 *                                                                        [ceil(rows/128), ceil(cols/128)] (multiplier)
 *
 * Activations stay fp32 for every scheme (weight-only): an NVFP4 checkpoint's input
 * scales are read, kept and reported (specula inspect) but not applied. Which matrices
 * are quantized is read from the tensors themselves (their dtype), checked against the
 * scheme the config declares. */
#ifndef SP_MODEL_QUANT_H
#define SP_MODEL_QUANT_H

#include "format/safetensors.h"
#include "kernels/weight.h"
#include "specula.h"

#include <cjson/cJSON.h>

/* Block formats: the layout constants every binding and kernel depends on (weight.h's
 * table). Checked at compile time, so a change to one that breaks another fails the build. */
#define SP_MXFP4_BLOCK 32        /* inputs per UE8M0 scale */
#define SP_MXFP4_BLOCK_BYTES 16  /* bytes per block: two E2M1 codes a byte */
#define SP_NVFP4_BLOCK 16        /* inputs per E4M3 scale */
#define SP_FP8_BLOCK 128         /* rows and columns per FP8 block scale */
_Static_assert(SP_MXFP4_BLOCK_BYTES * 2 == SP_MXFP4_BLOCK, "MXFP4: a block is 32 E2M1 codes, two a byte");
_Static_assert(SP_NVFP4_BLOCK % 2 == 0, "NVFP4: a block fills whole bytes of E2M1 pairs");
_Static_assert(SP_MXFP4_BLOCK % SP_NVFP4_BLOCK == 0, "FP4 kernels step in 16-input halves");
_Static_assert(SP_FP8_BLOCK % SP_MXFP4_BLOCK == 0 && (SP_FP8_BLOCK & (SP_FP8_BLOCK - 1)) == 0,
               "FP8: square power-of-two blocks");
_Static_assert(sizeof(float) == 4, "FP8 block scales are F32");

typedef enum sp_quant_method {
    SP_QUANT_NONE,
    SP_QUANT_MXFP4,
    SP_QUANT_NVFP4_MODELOPT,
    SP_QUANT_NVFP4_CT,
    SP_QUANT_FP8_BLOCK,
} sp_quant_method;

/* An activation scale found in the checkpoint (reported, not applied). */
typedef struct sp_input_scale {
    char *tensor;
    float value;
} sp_input_scale;

typedef struct sp_quant {
    sp_quant_method method;
    const char *source;   /* "config.json" or "hf_quant_config.json" (static) */
    char *algo;           /* quant_algo / format as written (owned), for reports */
    bool act_quant_declared; /* the config declares quantized input activations */
    sp_input_scale *input_scales;
    size_t n_input_scales, cap_input_scales;
    size_t n_quantized;   /* matrices bound in a quantized format */
    uint64_t packed_bytes; /* bytes of packed weights and their scales */
} sp_quant;

const char *sp_quant_method_name(sp_quant_method m);

/* Reads the scheme from config.json's quantization_config, else dir/hf_quant_config.json.
 * Unknown methods and unsupported variants are SP_ERR_UNSUPPORTED naming the field. */
sp_status sp_quant_load(sp_quant *q, const cJSON *config, const char *config_path,
                        const char *dir, sp_error *err);
void sp_quant_free(sp_quant *q);

/* Looks a tensor up by name: (tensor, file) or NULL. */
typedef const sp_st_tensor *(*sp_tensor_lookup)(void *ctx, const char *name, const char **file);

/* Binds the quantized matrix `base` (e.g. "model.layers.0.mlp.up_proj") of logical shape
 * [rows, cols] whose main tensor t (X.weight or X.weight_packed) is not a dense dtype. */
sp_status sp_quant_bind(sp_quant *q, sp_tensor_lookup find, void *ctx, const char *base,
                        const sp_st_tensor *t, const char *file, int64_t rows, int64_t cols,
                        sp_weight *out, sp_error *err);

/* Binds expert e of gpt-oss's MXFP4 tensors <base>_blocks / <base>_scales, logical shape
 * [rows, cols] per expert out of n_experts. */
sp_status sp_quant_bind_mxfp4_expert(sp_quant *q, sp_tensor_lookup find, void *ctx,
                                     const char *base, int64_t n_experts, int64_t e, int64_t rows,
                                     int64_t cols, sp_weight *out, sp_error *err);

#endif
