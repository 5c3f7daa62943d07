/* load_internal.h: the pieces of model loading split across files (model_load.c binds
 * what every family shares; model_load_moe.c the expert and MLA layers; quant.c reads
 * quantization configs and binds packed tensors; model_mem.c estimates memory). Not part of the public API. */
#ifndef SP_MODEL_LOAD_INTERNAL_H
#define SP_MODEL_LOAD_INTERNAL_H

#include "model/model.h"

sp_status sp_mla_dims(sp_model *m, sp_error *err);
sp_status sp_bind_mla(sp_model *m, int64_t l, sp_layer *L, sp_error *err);
sp_status sp_bind_moe(sp_model *m, int64_t l, sp_layer *L, sp_error *err);
/* One decoder layer l (norms, attention, MLP or MoE) into L (model_load.c). */
sp_status sp_bind_layer(sp_model *m, int64_t l, sp_layer *L, sp_error *err);
/* The multi-token prediction module (model_load_mtp.c), when the checkpoint has it; needs
 * room for layers[n_layers] in m->layers. */
sp_status sp_bind_mtp(sp_model *m, sp_error *err);
/* DeepSeek-V4 (model_load_dsv4.c): dimensions, then every tensor. */
sp_status sp_dsv4_dims(sp_model *m, sp_error *err);
sp_status sp_dsv4_bind(sp_model *m, sp_error *err);


#endif
