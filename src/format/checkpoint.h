/* checkpoint.h: the weights of a Hugging Face model directory, whole or sharded.
 *
 * Opens model.safetensors, or model.safetensors.index.json and every shard it names
 * ({"weight_map": {"<tensor>": "<shard file>"}}). Shard names must be plain file names
 * inside the directory. Every weight_map entry must exist in the shard it names, and a
 * tensor may live in one shard only. Lookups return views into the mapped shards. */
#ifndef SP_FORMAT_CHECKPOINT_H
#define SP_FORMAT_CHECKPOINT_H

#include "format/safetensors.h"
#include "util/strmap.h"

typedef struct sp_checkpoint {
    char *dir;
    sp_safetensors **shards;
    size_t n_shards;
    sp_strmap by_name;       /* tensor name -> index into entries */
    struct sp_ckpt_entry {
        const sp_st_tensor *tensor;
        const sp_safetensors *shard;
    } *entries;
    size_t n_entries;
    uint64_t total_bytes;    /* sum of the sizes of all tensors */
} sp_checkpoint;

sp_status sp_checkpoint_open(const char *dir, sp_checkpoint **out, sp_error *err);
void sp_checkpoint_close(sp_checkpoint *ck);

/* NULL when absent. When file is not NULL it receives the shard's path. */
const sp_st_tensor *sp_checkpoint_find(const sp_checkpoint *ck, const char *name,
                                       const char **file);

#endif
