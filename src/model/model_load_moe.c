/* model_load_moe.c: binding of mixture-of-experts and multi-head latent attention layers. */
#include "model/bind.h"
#include "model/load_internal.h"
#include "util/error.h"

sp_status sp_mla_dims(sp_model *m, sp_error *err)
{
    return sp_err(err, SP_ERR_UNSUPPORTED, "%s: multi-head latent attention is not supported yet",
                  m->cfg->path);
}

sp_status sp_bind_mla(sp_model *m, int64_t l, sp_layer *L, sp_error *err)
{
    (void)l;
    (void)L;
    return sp_mla_dims(m, err);
}

sp_status sp_bind_moe(sp_model *m, int64_t l, sp_layer *L, sp_error *err)
{
    (void)L;
    return sp_err(err, SP_ERR_UNSUPPORTED, "%s: layer %lld: mixture-of-experts is not supported yet",
                  m->cfg->path, (long long)l);
}

sp_status sp_quant_config_load(sp_model *m, sp_error *err)
{
    if (cJSON_GetObjectItemCaseSensitive(m->cfg->json, "quantization_config"))
        return sp_err(err, SP_ERR_UNSUPPORTED, "%s: field 'quantization_config': quantized "
                      "checkpoints are not supported yet", m->cfg->path);
    return SP_OK;
}

void sp_quant_config_free(sp_model *m)
{
    (void)m;
}
