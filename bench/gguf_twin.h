/* gguf_twin.h: writes the GGUF twin of a random checkpoint (same shapes, types and
 * values as the safetensors file make_random_model writes), for llama.cpp to run in
 * side-by-side benchmarks. Format facts (GGUF v3, tensor names, MXFP4 block layout) come
 * from llama.cpp's gguf-py and convert_hf_to_gguf.py; the code is ours. */
#ifndef SP_BENCH_GGUF_TWIN_H
#define SP_BENCH_GGUF_TWIN_H

#include "format/safetensors_write.h"

#include <stdint.h>

typedef struct gguf_hparams {
    const char *arch;   /* "llama" or "gpt-oss" */
    uint32_t n_ctx, n_embd, n_ff, n_layer, n_head, n_head_kv, n_vocab, head_dim;
    uint32_t n_expert, n_expert_used, sliding_window; /* gpt-oss */
    float rope_theta, rms_eps;
} gguf_hparams;

/* Writes path from the HF tensor table t[0..n) (their fill generators are re-run).
 * Returns 0 or prints why and returns 1. */
int gguf_twin_write(const char *path, const gguf_hparams *hp, const sp_st_out *t, size_t n);

#endif
