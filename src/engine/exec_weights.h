/* exec_weights.h: putting a loaded model's weights where its backend reads them
 * (exec_weights.c). */
#ifndef SP_ENGINE_EXEC_WEIGHTS_H
#define SP_ENGINE_EXEC_WEIGHTS_H

#include "model/model.h"

typedef struct sp_exec_store sp_exec_store;

/* Fills m->exec (after binding, once m->be is open). */
sp_status sp_exec_weights_build(sp_model *m, sp_error *err);
void sp_exec_weights_free(sp_model *m);
/* The view of a host weight view (model->layers..., any row range of it) as the backend
 * sees it; data is NULL when it lies outside every region. */
sp_weight sp_exec_weight_of(const sp_model *m, const sp_weight *host);
/* Bytes the weights take in device memory (0 on a host-memory backend). */
uint64_t sp_exec_weights_device_bytes(const sp_model *m);

#endif
