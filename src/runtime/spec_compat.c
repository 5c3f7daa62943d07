/* spec_compat.c: whether a draft model can draft for a target (see
 * sp_spec_check_compat in specula.h). The rules follow llama.cpp's
 * common_speculative_are_compatible: there is no translation between vocabularies, so
 * the ids must mean the same tokens. */
#include "model/model.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

#define VOCAB_PAD_MAX 128
#define FIRST_CHECKED_ID 5

static bool same_eos(const sp_hf_config *a, const sp_hf_config *b)
{
    if (a->n_eos_ids != b->n_eos_ids)
        return false;
    for (size_t i = 0; i < a->n_eos_ids; i++) {
        bool found = false;
        for (size_t j = 0; j < b->n_eos_ids && !found; j++)
            found = a->eos_ids[i] == b->eos_ids[j];
        if (!found)
            return false;
    }
    return true;
}

static sp_status check_tokenizers(const sp_tokenizer *tt, const sp_tokenizer *dt, sp_error *err)
{
    if (strcmp(sp_tokenizer_model_type(tt), sp_tokenizer_model_type(dt)))
        return sp_err(err, SP_ERR_INVALID_ARG, "draft tokenizer is %s, the target's is %s",
                      sp_tokenizer_model_type(dt), sp_tokenizer_model_type(tt));
    if (sp_tokenizer_bos_id(tt) != sp_tokenizer_bos_id(dt) || sp_tokenizer_eos_id(tt) != sp_tokenizer_eos_id(dt))
        return sp_err(err, SP_ERR_INVALID_ARG, "draft tokenizer has BOS/EOS ids %d/%d, the target's "
                      "%d/%d", sp_tokenizer_bos_id(dt), sp_tokenizer_eos_id(dt),
                      sp_tokenizer_bos_id(tt), sp_tokenizer_eos_id(tt));
    int64_t n = sp_tokenizer_n_vocab(tt) < sp_tokenizer_n_vocab(dt) ? sp_tokenizer_n_vocab(tt)
                                                                    : sp_tokenizer_n_vocab(dt);
    for (int64_t id = FIRST_CHECKED_ID; id < n; id++) {
        size_t la = 0, lb = 0;
        const char *a = sp_tokenizer_id_to_token(tt, (int32_t)id, &la);
        const char *b = sp_tokenizer_id_to_token(dt, (int32_t)id, &lb);
        if (!a || !b)
            continue;
        if (la != lb || memcmp(a, b, la))
            return sp_err(err, SP_ERR_INVALID_ARG, "token %lld differs: the target's is '%.*s', the "
                          "draft's '%.*s' (the models use different vocabularies)", (long long)id,
                          (int)(la > 40 ? 40 : la), a, (int)(lb > 40 ? 40 : lb), b);
    }
    return SP_OK;
}

sp_status sp_spec_check_compat(const sp_model *t, const sp_model *d, const sp_tokenizer *tt,
                               const sp_tokenizer *dt, sp_error *err)
{
    int64_t diff = llabs(t->n_vocab - d->n_vocab);
    sp_status st = SP_OK;
    if (diff > VOCAB_PAD_MAX)
        st = sp_err(err, SP_ERR_INVALID_ARG, "draft vocabulary has %lld tokens, the target's %lld: "
                    "more than %d apart, so not the same vocabulary padded", (long long)d->n_vocab,
                    (long long)t->n_vocab, VOCAB_PAD_MAX);
    else if (t->cfg->bos_id != d->cfg->bos_id)
        st = sp_err(err, SP_ERR_INVALID_ARG, "draft BOS id %lld differs from the target's %lld",
                    (long long)d->cfg->bos_id, (long long)t->cfg->bos_id);
    else if (!same_eos(t->cfg, d->cfg))
        st = sp_err(err, SP_ERR_INVALID_ARG, "draft end-of-sequence ids differ from the target's");
    else if (tt && dt)
        st = check_tokenizers(tt, dt, err);
    if (st != SP_OK)
        sp_err_prefix(err, "%s cannot draft for %s", d->dir, t->dir);
    return st;
}
