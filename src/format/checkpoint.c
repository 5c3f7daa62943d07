/* checkpoint.c: opening single-file and sharded safetensors checkpoints (see checkpoint.h). */
#include "format/checkpoint.h"
#include "util/error.h"
#include "util/fileio.h"
#include "util/json.h"

#include <stdlib.h>
#include <string.h>

#define INDEX_MAX_BYTES (64u << 20)

static sp_status add_shard(sp_checkpoint *ck, const char *file, sp_safetensors **out,
                           sp_error *err)
{
    for (size_t i = 0; i < ck->n_shards; i++)
        if (strcmp(sp_path_basename(ck->shards[i]->path), file) == 0) {
            *out = ck->shards[i];
            return SP_OK;
        }
    char *path = sp_path_join(ck->dir, file);
    if (!path)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    sp_safetensors **grown = realloc(ck->shards, (ck->n_shards + 1) * sizeof *grown);
    if (!grown) {
        free(path);
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    ck->shards = grown;
    sp_status st = sp_safetensors_open(path, out, err);
    free(path);
    if (st != SP_OK)
        return st;
    ck->shards[ck->n_shards++] = *out;
    return SP_OK;
}

static sp_status add_entry(sp_checkpoint *ck, const sp_st_tensor *t, const sp_safetensors *sh,
                           sp_error *err)
{
    int r = sp_strmap_put(&ck->by_name, t->name, strlen(t->name), (int64_t)ck->n_entries);
    if (r < 0)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    if (r == 0) {
        int64_t idx;
        sp_strmap_get(&ck->by_name, t->name, strlen(t->name), &idx);
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' is also in %s", sh->path, t->name,
                      ck->entries[idx].shard->path);
    }
    ck->entries[ck->n_entries].tensor = t;
    ck->entries[ck->n_entries].shard = sh;
    ck->n_entries++;
    ck->total_bytes += t->n_bytes;
    return SP_OK;
}

static bool plain_file_name(const char *s)
{
    return s[0] && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") != 0 &&
           strcmp(s, "..") != 0;
}

static sp_status open_sharded(sp_checkpoint *ck, const char *index_path, sp_error *err)
{
    cJSON *root;
    sp_status st = sp_json_parse_file(index_path, INDEX_MAX_BYTES, &root, err);
    if (st != SP_OK)
        return st;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return sp_err(err, SP_ERR_FORMAT, "%s: field 'weight_map' missing or not an object",
                      index_path);
    }
    size_t n = (size_t)cJSON_GetArraySize(wm);
    if (n == 0) {
        cJSON_Delete(root);
        return sp_err(err, SP_ERR_FORMAT, "%s: field 'weight_map' is empty", index_path);
    }
    ck->entries = calloc(n ? n : 1, sizeof *ck->entries);
    if (!ck->entries || !sp_strmap_init(&ck->by_name, n)) {
        cJSON_Delete(root);
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    for (const cJSON *e = wm->child; e && st == SP_OK; e = e->next) {
        if (!cJSON_IsString(e) || !plain_file_name(e->valuestring)) {
            st = sp_err(err, SP_ERR_FORMAT,
                        "%s: weight_map entry for '%s' is not a plain shard file name",
                        index_path, e->string);
            break;
        }
        sp_safetensors *sh;
        st = add_shard(ck, e->valuestring, &sh, err);
        if (st != SP_OK)
            break;
        const sp_st_tensor *t = sp_safetensors_find(sh, e->string);
        if (!t) {
            st = sp_err(err, SP_ERR_FORMAT, "%s: weight_map puts tensor '%s' in %s, which lacks it",
                        index_path, e->string, e->valuestring);
            break;
        }
        st = add_entry(ck, t, sh, err);
        if (st != SP_OK)
            sp_err_prefix(err, "%s", index_path);
    }
    cJSON_Delete(root);
    return st;
}

static sp_status open_single(sp_checkpoint *ck, sp_error *err)
{
    sp_safetensors *sh;
    sp_status st = add_shard(ck, "model.safetensors", &sh, err);
    if (st != SP_OK)
        return st;
    ck->entries = calloc(sh->n_tensors ? sh->n_tensors : 1, sizeof *ck->entries);
    if (!ck->entries || !sp_strmap_init(&ck->by_name, sh->n_tensors))
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < sh->n_tensors && st == SP_OK; i++)
        st = add_entry(ck, &sh->tensors[i], sh, err);
    return st;
}

sp_status sp_checkpoint_open(const char *dir, sp_checkpoint **out, sp_error *err)
{
    *out = NULL;
    if (!sp_dir_exists(dir))
        return sp_err(err, SP_ERR_IO, "%s: not a directory", dir);
    sp_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = strdup(dir))) {
        free(ck);
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    char *single = sp_path_join(dir, "model.safetensors");
    char *index = sp_path_join(dir, "model.safetensors.index.json");
    sp_status st;
    if (!single || !index)
        st = sp_err(err, SP_ERR_NOMEM, "out of memory");
    else if (sp_file_exists(index))
        st = open_sharded(ck, index, err);
    else if (sp_file_exists(single))
        st = open_single(ck, err);
    else
        st = sp_err(err, SP_ERR_IO,
                    "%s: no model.safetensors or model.safetensors.index.json in the directory",
                    dir);
    free(single);
    free(index);
    if (st != SP_OK) {
        sp_checkpoint_close(ck);
        return st;
    }
    *out = ck;
    return SP_OK;
}

void sp_checkpoint_close(sp_checkpoint *ck)
{
    if (!ck)
        return;
    for (size_t i = 0; i < ck->n_shards; i++)
        sp_safetensors_close(ck->shards[i]);
    free(ck->shards);
    free(ck->entries);
    sp_strmap_fini(&ck->by_name);
    free(ck->dir);
    free(ck);
}

const sp_st_tensor *sp_checkpoint_find(const sp_checkpoint *ck, const char *name,
                                       const char **file)
{
    int64_t idx;
    if (!sp_strmap_get(&ck->by_name, name, strlen(name), &idx))
        return NULL;
    if (file)
        *file = ck->entries[idx].shard->path;
    return ck->entries[idx].tensor;
}
