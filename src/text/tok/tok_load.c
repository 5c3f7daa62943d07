/* tok_load.c: building a tokenizer from tokenizer.json: the model (vocabulary, merges),
 * added tokens, and the normalizer / pre-tokenizer / post-processor / decoder trees.
 * Every id is checked against the vocabulary, every merge against the tokens it names,
 * and unknown component types are a clear "unsupported" error naming the field. */
#include "text/tok/tok_internal.h"
#include "util/ckd.h"
#include "util/error.h"
#include "util/json.h"
#include "util/json_scan.h"
#include "util/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VOCAB (1 << 24)
#define CHAR_IDS 0x30000
#define CACHE_SLOTS (1 << 16)

extern const char sp_gpt2_pattern[];
extern const char sp_whitespace_pattern[];

typedef struct loader {
    sp_tokenizer *t;
    const char *what; /* file name for messages */
    sp_error *err;
    /* model.vocab and model.merges, read with the scanner from the raw text */
    const char *raw;
    size_t vocab_at, vocab_end, merges_at, merges_end; /* byte ranges; 0,0 = absent */
} loader;

static sp_status bad(loader *L, const char *field, const char *msg)
{
    return sp_err(L->err, SP_ERR_FORMAT, "%s: field '%s': %s", L->what, field, msg);
}

static sp_status nomem(loader *L)
{
    return sp_err(L->err, SP_ERR_NOMEM, "%s: out of memory", L->what);
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static const char *type_of(const cJSON *o)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static bool get_bool(const cJSON *o, const char *k, bool def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

static const char *get_str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- patterns -------------------------------------------------------------------------- */

static sp_status parse_pattern(loader *L, const cJSON *o, const char *field, sp_pattern *p)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "Regex");
    if (cJSON_IsString(s)) {
        p->kind = SP_PAT_STRING;
        p->str_len = strlen(s->valuestring);
        p->str = dup_n(s->valuestring, p->str_len);
        return p->str ? SP_OK : nomem(L);
    }
    if (cJSON_IsString(r)) {
        p->kind = SP_PAT_REGEX;
        sp_status st = sp_regex_compile(r->valuestring, strlen(r->valuestring), &p->re, L->err);
        if (st != SP_OK)
            sp_err_prefix(L->err, "%s: field '%s'", L->what, field);
        return st;
    }
    return bad(L, field, "expected {\"String\": ...} or {\"Regex\": ...}");
}

static sp_status parse_behavior(loader *L, const cJSON *o, sp_split_behavior *b)
{
    const char *s = get_str(o, "behavior");
    if (!s || !strcmp(s, "Isolated"))
        *b = SP_SPLIT_ISOLATED;
    else if (!strcmp(s, "Removed"))
        *b = SP_SPLIT_REMOVED;
    else if (!strcmp(s, "MergedWithPrevious"))
        *b = SP_SPLIT_MERGED_PREV;
    else if (!strcmp(s, "MergedWithNext"))
        *b = SP_SPLIT_MERGED_NEXT;
    else if (!strcmp(s, "Contiguous"))
        *b = SP_SPLIT_CONTIGUOUS;
    else
        return sp_err(L->err, SP_ERR_UNSUPPORTED, "%s: split behavior '%s' is not supported",
                      L->what, s);
    return SP_OK;
}

static sp_status one_char(loader *L, const char *s, const char *field, uint32_t *cp)
{
    size_t n = s ? strlen(s) : 0;
    if (!n || sp_utf8_decode((const unsigned char *)s, n, cp) != n)
        return bad(L, field, "expected a single character");
    return SP_OK;
}

/* ---- normalizers ------------------------------------------------------------------------ */

static sp_status parse_normalizer(loader *L, const cJSON *o, int depth, sp_normalizer **out);

static sp_status parse_norm_children(loader *L, const cJSON *arr, int depth, sp_normalizer *n)
{
    if (!cJSON_IsArray(arr))
        return bad(L, "normalizers", "expected a list");
    size_t k = (size_t)cJSON_GetArraySize(arr);
    n->children = calloc(k ? k : 1, sizeof *n->children);
    if (!n->children)
        return nomem(L);
    /* a child that fails half-built is still counted, so the parent's free releases it */
    for (const cJSON *c = arr->child; c; c = c->next) {
        sp_status st = parse_normalizer(L, c, depth + 1, &n->children[n->n_children]);
        if (n->children[n->n_children])
            n->n_children++;
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

static sp_status parse_normalizer(loader *L, const cJSON *o, int depth, sp_normalizer **out)
{
    *out = NULL;
    if (depth > 32)
        return bad(L, "normalizer", "nested too deeply");
    const char *ty = type_of(o);
    if (!ty)
        return bad(L, "normalizer", "missing 'type'");
    sp_normalizer *n = calloc(1, sizeof *n);
    if (!n)
        return nomem(L);
    *out = n;
    sp_status st = SP_OK;
    if (!strcmp(ty, "NFC")) n->kind = SP_NORM_NFC;
    else if (!strcmp(ty, "NFD")) n->kind = SP_NORM_NFD;
    else if (!strcmp(ty, "NFKC")) n->kind = SP_NORM_NFKC;
    else if (!strcmp(ty, "NFKD")) n->kind = SP_NORM_NFKD;
    else if (!strcmp(ty, "Lowercase")) n->kind = SP_NORM_LOWERCASE;
    else if (!strcmp(ty, "StripAccents")) n->kind = SP_NORM_STRIP_ACCENTS;
    else if (!strcmp(ty, "ByteLevel")) n->kind = SP_NORM_BYTE_LEVEL;
    else if (!strcmp(ty, "Strip")) {
        n->kind = SP_NORM_STRIP;
        n->left = get_bool(o, "strip_left", true);
        n->right = get_bool(o, "strip_right", true);
    } else if (!strcmp(ty, "Replace")) {
        n->kind = SP_NORM_REPLACE;
        const char *c = get_str(o, "content");
        if (!c)
            return bad(L, "normalizer.content", "missing");
        n->content_len = strlen(c);
        if (!(n->content = dup_n(c, n->content_len)))
            return nomem(L);
        st = parse_pattern(L, cJSON_GetObjectItemCaseSensitive(o, "pattern"), "normalizer.pattern",
                           &n->pattern);
    } else if (!strcmp(ty, "Prepend") || !strcmp(ty, "Append")) {
        n->kind = ty[0] == 'P' ? SP_NORM_PREPEND : SP_NORM_APPEND;
        const char *c = get_str(o, ty[0] == 'P' ? "prepend" : "append");
        if (!c)
            return bad(L, "normalizer", "Prepend/Append without its text");
        n->content_len = strlen(c);
        if (!(n->content = dup_n(c, n->content_len)))
            return nomem(L);
    } else if (!strcmp(ty, "Sequence")) {
        n->kind = SP_NORM_SEQUENCE;
        st = parse_norm_children(L, cJSON_GetObjectItemCaseSensitive(o, "normalizers"), depth, n);
    } else if (!strcmp(ty, "BertNormalizer")) {
        n->kind = SP_NORM_BERT;
        n->clean_text = get_bool(o, "clean_text", true);
        n->chinese = get_bool(o, "handle_chinese_chars", true);
        n->lowercase = get_bool(o, "lowercase", true);
        const cJSON *sa = cJSON_GetObjectItemCaseSensitive(o, "strip_accents");
        n->strip_accents = cJSON_IsBool(sa) ? cJSON_IsTrue(sa) : n->lowercase;
    } else {
        return sp_err(L->err, SP_ERR_UNSUPPORTED, "%s: normalizer type '%s' is not supported",
                      L->what, ty);
    }
    return st;
}

/* ---- pre-tokenizers ----------------------------------------------------------------------- */

static sp_status parse_pretok(loader *L, const cJSON *o, int depth, sp_pretok **out);

static sp_status compile_builtin(loader *L, sp_pattern *p, const char *pat)
{
    p->kind = SP_PAT_REGEX;
    return sp_regex_compile(pat, strlen(pat), &p->re, L->err);
}

static sp_status parse_metaspace_fields(loader *L, const cJSON *o, uint32_t *rep,
                                        sp_prepend_scheme *scheme)
{
    const char *r = get_str(o, "replacement");
    sp_status st = one_char(L, r ? r : "\xe2\x96\x81", "replacement", rep);
    if (st != SP_OK)
        return st;
    const char *ps = get_str(o, "prepend_scheme");
    if (ps) {
        if (!strcmp(ps, "always")) *scheme = SP_PREPEND_ALWAYS;
        else if (!strcmp(ps, "first")) *scheme = SP_PREPEND_FIRST;
        else if (!strcmp(ps, "never")) *scheme = SP_PREPEND_NEVER;
        else return bad(L, "prepend_scheme", "expected always, first or never");
    } else {
        *scheme = get_bool(o, "add_prefix_space", true) ? SP_PREPEND_ALWAYS : SP_PREPEND_NEVER;
    }
    return SP_OK;
}

static sp_status parse_pretok(loader *L, const cJSON *o, int depth, sp_pretok **out)
{
    *out = NULL;
    if (depth > 32)
        return bad(L, "pre_tokenizer", "nested too deeply");
    const char *ty = type_of(o);
    if (!ty)
        return bad(L, "pre_tokenizer", "missing 'type'");
    sp_pretok *p = calloc(1, sizeof *p);
    if (!p)
        return nomem(L);
    *out = p;
    sp_status st = SP_OK;
    if (!strcmp(ty, "Split")) {
        p->kind = SP_PRE_SPLIT;
        p->invert = get_bool(o, "invert", false);
        if ((st = parse_behavior(L, o, &p->behavior)))
            return st;
        st = parse_pattern(L, cJSON_GetObjectItemCaseSensitive(o, "pattern"), "pre_tokenizer.pattern",
                           &p->pattern);
    } else if (!strcmp(ty, "ByteLevel")) {
        p->kind = SP_PRE_BYTE_LEVEL;
        p->add_prefix_space = get_bool(o, "add_prefix_space", true);
        p->use_regex = get_bool(o, "use_regex", true);
        if (p->use_regex)
            st = compile_builtin(L, &p->pattern, sp_gpt2_pattern);
    } else if (!strcmp(ty, "Digits")) {
        p->kind = SP_PRE_DIGITS;
        p->individual_digits = get_bool(o, "individual_digits", false);
    } else if (!strcmp(ty, "Metaspace")) {
        p->kind = SP_PRE_METASPACE;
        p->split = get_bool(o, "split", true);
        if ((st = parse_metaspace_fields(L, o, &p->replacement, &p->prepend)))
            return st;
        p->repl_len = sp_utf8_encode(p->replacement, p->repl_utf8);
    } else if (!strcmp(ty, "Punctuation")) {
        p->kind = SP_PRE_PUNCTUATION;
        st = parse_behavior(L, o, &p->behavior);
    } else if (!strcmp(ty, "Whitespace")) {
        p->kind = SP_PRE_WHITESPACE;
        st = compile_builtin(L, &p->pattern, sp_whitespace_pattern);
    } else if (!strcmp(ty, "WhitespaceSplit")) {
        p->kind = SP_PRE_WHITESPACE_SPLIT;
    } else if (!strcmp(ty, "BertPreTokenizer")) {
        p->kind = SP_PRE_BERT;
    } else if (!strcmp(ty, "CharDelimiterSplit")) {
        p->kind = SP_PRE_CHAR_DELIMITER;
        p->pattern.kind = SP_PAT_CHAR;
        st = one_char(L, get_str(o, "delimiter"), "delimiter", &p->pattern.ch);
    } else if (!strcmp(ty, "Sequence")) {
        p->kind = SP_PRE_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "pretokenizers");
        if (!cJSON_IsArray(arr))
            return bad(L, "pretokenizers", "expected a list");
        size_t k = (size_t)cJSON_GetArraySize(arr);
        if (!(p->children = calloc(k ? k : 1, sizeof *p->children)))
            return nomem(L);
        for (const cJSON *c = arr->child; c && st == SP_OK; c = c->next) {
            st = parse_pretok(L, c, depth + 1, &p->children[p->n_children]);
            if (p->children[p->n_children]) /* counted even half-built: freed with p */
                p->n_children++;
        }
    } else {
        return sp_err(L->err, SP_ERR_UNSUPPORTED, "%s: pre_tokenizer type '%s' is not supported",
                      L->what, ty);
    }
    return st;
}

/* ---- decoders ---------------------------------------------------------------------------- */

static sp_status parse_decoder(loader *L, const cJSON *o, int depth, sp_decoder **out)
{
    *out = NULL;
    if (depth > 32)
        return bad(L, "decoder", "nested too deeply");
    const char *ty = type_of(o);
    if (!ty)
        return bad(L, "decoder", "missing 'type'");
    sp_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return nomem(L);
    *out = d;
    sp_status st = SP_OK;
    if (!strcmp(ty, "ByteLevel")) d->kind = SP_DEC_BYTE_LEVEL;
    else if (!strcmp(ty, "ByteFallback")) d->kind = SP_DEC_BYTE_FALLBACK;
    else if (!strcmp(ty, "Fuse")) d->kind = SP_DEC_FUSE;
    else if (!strcmp(ty, "Metaspace")) {
        d->kind = SP_DEC_METASPACE;
        sp_prepend_scheme s;
        st = parse_metaspace_fields(L, o, &d->ch, &s);
        d->prepend = s != SP_PREPEND_NEVER;
    } else if (!strcmp(ty, "Strip")) {
        d->kind = SP_DEC_STRIP;
        int64_t a, b;
        if ((st = one_char(L, get_str(o, "content"), "decoder.content", &d->ch)) ||
            (st = sp_json_int(o, "start", L->what, 0, 0, 1 << 20, &a, L->err)) ||
            (st = sp_json_int(o, "stop", L->what, 0, 0, 1 << 20, &b, L->err)))
            return st;
        d->start = a;
        d->stop = b;
    } else if (!strcmp(ty, "Replace")) {
        d->kind = SP_DEC_REPLACE;
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
        const char *from = get_str(pat, "String"), *to = get_str(o, "content");
        if (!from || !to)
            return sp_err(L->err, SP_ERR_UNSUPPORTED,
                          "%s: decoder Replace needs a String pattern and a content", L->what);
        d->a_len = strlen(from);
        d->b_len = strlen(to);
        if (!(d->a = dup_n(from, d->a_len)) || !(d->b = dup_n(to, d->b_len)))
            return nomem(L);
    } else if (!strcmp(ty, "WordPiece")) {
        d->kind = SP_DEC_WORDPIECE;
        const char *pre = get_str(o, "prefix");
        d->cleanup = get_bool(o, "cleanup", true);
        d->a_len = strlen(pre ? pre : "##");
        if (!(d->a = dup_n(pre ? pre : "##", d->a_len)))
            return nomem(L);
    } else if (!strcmp(ty, "BPEDecoder")) {
        d->kind = SP_DEC_BPE;
        const char *suf = get_str(o, "suffix");
        d->a_len = strlen(suf ? suf : "</w>");
        if (!(d->a = dup_n(suf ? suf : "</w>", d->a_len)))
            return nomem(L);
    } else if (!strcmp(ty, "Sequence")) {
        d->kind = SP_DEC_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "decoders");
        if (!cJSON_IsArray(arr))
            return bad(L, "decoders", "expected a list");
        size_t k = (size_t)cJSON_GetArraySize(arr);
        if (!(d->children = calloc(k ? k : 1, sizeof *d->children)))
            return nomem(L);
        for (const cJSON *c = arr->child; c && st == SP_OK; c = c->next) {
            st = parse_decoder(L, c, depth + 1, &d->children[d->n_children]);
            if (d->children[d->n_children]) /* counted even half-built: freed with d */
                d->n_children++;
        }
    } else {
        return sp_err(L->err, SP_ERR_UNSUPPORTED, "%s: decoder type '%s' is not supported",
                      L->what, ty);
    }
    return st;
}

/* ---- post-processors ---------------------------------------------------------------------- */

static sp_status post_item(loader *L, sp_post *p, bool seq, const int32_t *ids, size_t n)
{
    size_t bytes;
    if (sp_ckd_mul_size(&bytes, p->n_items + 1, sizeof *p->items))
        return nomem(L);
    struct sp_post_item *g = realloc(p->items, bytes);
    if (!g)
        return nomem(L);
    p->items = g;
    struct sp_post_item *it = &p->items[p->n_items++];
    memset(it, 0, sizeof *it);
    it->is_sequence = seq;
    if (n) {
        if (sp_ckd_mul_size(&bytes, n, sizeof *it->ids) || !(it->ids = malloc(bytes)))
            return nomem(L);
        memcpy(it->ids, ids, n * sizeof *ids);
        it->n_ids = n;
    }
    return SP_OK;
}

static sp_status check_id(loader *L, int64_t id, const char *field)
{
    if (id < 0 || id >= L->t->n_vocab)
        return sp_err(L->err, SP_ERR_FORMAT, "%s: field '%s': id %lld is outside the vocabulary [0, %lld)",
                      L->what, field, (long long)id, (long long)L->t->n_vocab);
    return SP_OK;
}

static sp_status parse_template(loader *L, const cJSON *o, sp_post *p)
{
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(o, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(o, "special_tokens");
    if (!cJSON_IsArray(single))
        return bad(L, "post_processor.single", "expected a list");
    for (const cJSON *it = single->child; it; it = it->next) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        sp_status st;
        if (sq) {
            st = post_item(L, p, true, NULL, 0);
        } else if (sp) {
            const char *name = get_str(sp, "id");
            const cJSON *e = name ? cJSON_GetObjectItemCaseSensitive(specials, name) : NULL;
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(e, "ids");
            if (!cJSON_IsArray(ids))
                return sp_err(L->err, SP_ERR_FORMAT,
                              "%s: post_processor: special token '%s' has no ids in special_tokens",
                              L->what, name ? name : "?");
            int32_t v[64];
            size_t k = 0;
            for (const cJSON *x = ids->child; x && k < 64; x = x->next) {
                int64_t id;
                if ((st = sp_json_as_int(x, L->what, "special_tokens.ids", 0, INT32_MAX, &id, L->err)) ||
                    (st = check_id(L, id, "post_processor.special_tokens")))
                    return st;
                v[k++] = (int32_t)id;
            }
            st = post_item(L, p, false, v, k);
        } else {
            return bad(L, "post_processor.single", "items must be SpecialToken or Sequence");
        }
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

static sp_status pair_id(loader *L, const cJSON *o, const char *k, int32_t *id)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 2)
        return bad(L, k, "expected [token, id]");
    int64_t v;
    sp_status st = sp_json_as_int(a->child->next, L->what, k, 0, INT32_MAX, &v, L->err);
    if (st == SP_OK && (st = check_id(L, v, k)) == SP_OK)
        *id = (int32_t)v;
    return st;
}

static sp_status parse_post(loader *L, const cJSON *o, int depth, sp_post **out)
{
    *out = NULL;
    if (depth > 32)
        return bad(L, "post_processor", "nested too deeply");
    const char *ty = type_of(o);
    if (!ty)
        return bad(L, "post_processor", "missing 'type'");
    sp_post *p = calloc(1, sizeof *p);
    if (!p)
        return nomem(L);
    *out = p;
    sp_status st = SP_OK;
    if (!strcmp(ty, "TemplateProcessing")) {
        p->kind = SP_POST_TEMPLATE;
        st = parse_template(L, o, p);
    } else if (!strcmp(ty, "ByteLevel")) {
        p->kind = SP_POST_BYTE_LEVEL;
    } else if (!strcmp(ty, "BertProcessing") || !strcmp(ty, "RobertaProcessing")) {
        p->kind = SP_POST_TEMPLATE;
        int32_t cls, sep;
        if ((st = pair_id(L, o, "cls", &cls)) || (st = pair_id(L, o, "sep", &sep)) ||
            (st = post_item(L, p, false, &cls, 1)) || (st = post_item(L, p, true, NULL, 0)))
            return st;
        st = post_item(L, p, false, &sep, 1);
    } else if (!strcmp(ty, "Sequence")) {
        p->kind = SP_POST_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "processors");
        if (!cJSON_IsArray(arr))
            return bad(L, "processors", "expected a list");
        size_t k = (size_t)cJSON_GetArraySize(arr);
        if (!(p->children = calloc(k ? k : 1, sizeof *p->children)))
            return nomem(L);
        for (const cJSON *c = arr->child; c && st == SP_OK; c = c->next) {
            st = parse_post(L, c, depth + 1, &p->children[p->n_children]);
            if (p->children[p->n_children]) /* counted even half-built: freed with p */
                p->n_children++;
        }
    } else {
        return sp_err(L->err, SP_ERR_UNSUPPORTED, "%s: post_processor type '%s' is not supported",
                      L->what, ty);
    }
    return st;
}

void sp_post_free(sp_post *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_items; i++)
        free(p->items[i].ids);
    free(p->items);
    for (size_t i = 0; i < p->n_children; i++)
        sp_post_free(p->children[i]);
    free(p->children);
    free(p);
}

/* ---- vocabulary and model ----------------------------------------------------------------- */

static sp_status set_vocab_id(loader *L, int64_t id, char *w, size_t l, size_t *cap)
{
    sp_tokenizer *t = L->t;
    if (id >= (int64_t)*cap) {
        size_t nc = *cap ? *cap : 1024;
        while ((int64_t)nc <= id)
            nc *= 2;
        char **v = realloc(t->vocab, nc * sizeof *v);
        if (!v)
            return nomem(L);
        t->vocab = v;
        uint32_t *vl = realloc(t->vocab_len, nc * sizeof *vl);
        if (!vl)
            return nomem(L);
        t->vocab_len = vl;
        memset(t->vocab + *cap, 0, (nc - *cap) * sizeof *v);
        memset(t->vocab_len + *cap, 0, (nc - *cap) * sizeof *vl);
        *cap = nc;
    }
    int r = sp_strmap_put(&t->vocab_map, w, l, id);
    if (r < 0)
        return nomem(L);
    if (r == 0)
        return sp_err(L->err, SP_ERR_FORMAT, "%s: model.vocab: token '%.60s' appears twice",
                      L->what, w);
    if (t->vocab[id])
        return sp_err(L->err, SP_ERR_FORMAT,
                      "%s: model.vocab: id %lld is used by both '%.60s' and '%.60s'", L->what,
                      (long long)id, t->vocab[id], w);
    t->vocab[id] = w;
    t->vocab_len[id] = (uint32_t)l;
    if (id + 1 > t->n_vocab)
        t->n_vocab = id + 1;
    return SP_OK;
}

/* model.vocab: {"token": id, ...}, scanned in place (see json_scan.h). */
static sp_status load_vocab(loader *L)
{
    sp_tokenizer *t = L->t;
    if (L->vocab_end <= L->vocab_at)
        return bad(L, "model.vocab", "missing: expected an object of token -> id");
    size_t span = L->vocab_end - L->vocab_at;
    /* a decoded key plus its NUL never exceeds its JSON encoding ("k":0 is 5+ bytes) */
    t->vocab_arena = malloc(span + 1);
    if (!t->vocab_arena || !sp_strmap_init(&t->vocab_map, span / 24 + 16))
        return nomem(L);
    sp_jscan j;
    sp_jscan_init(&j, L->raw, L->vocab_end, L->what, L->err);
    j.pos = L->vocab_at;
    if (!sp_jscan_expect(&j, '{'))
        return bad(L, "model.vocab", "expected an object of token -> id");
    char *w = t->vocab_arena, *key = NULL;
    size_t key_cap = 0, cap = 0, kl;
    bool first = true;
    sp_status st = SP_OK;
    while (st == SP_OK && sp_jscan_next(&j, '}', &first)) {
        int64_t id;
        if (!sp_jscan_string(&j, &key, &key_cap, &kl) || !sp_jscan_expect(&j, ':') ||
            !sp_jscan_int(&j, &id))
            break;
        if (id < 0 || id >= MAX_VOCAB) {
            st = sp_err(L->err, SP_ERR_FORMAT, "%s: model.vocab: token '%.60s' has id %lld, "
                        "outside [0, %d)", L->what, key, (long long)id, MAX_VOCAB);
            break;
        }
        memcpy(w, key, kl + 1);
        st = set_vocab_id(L, id, w, kl, &cap);
        w += kl + 1;
    }
    free(key);
    if (st == SP_OK && j.failed)
        st = L->err ? L->err->status : SP_ERR_FORMAT;
    return st;
}

static int32_t lookup(const sp_tokenizer *t, const char *s, size_t n)
{
    int64_t v;
    return sp_strmap_get(&t->vocab_map, s, n, &v) ? (int32_t)v : -1;
}

/* Merges are resolved in batches: the three vocabulary lookups of every merge in a batch
 * are hashed and prefetched first, then resolved, then their merge-table slots prefetched
 * and filled, so the cache misses of a 200k-merge vocabulary overlap. */
#define MERGE_BATCH 64

typedef struct merge_item {
    uint32_t rank;
    size_t a, al, b, bl, ab, abl; /* offsets into the batch text: a, b, a + b */
    uint32_t ha, hb, hab;
    int32_t ia, ib, iab;
} merge_item;

typedef struct merge_batch {
    merge_item it[MERGE_BATCH];
    size_t n;
    char *text;
    size_t len, cap;
} merge_batch;

static bool batch_put(merge_batch *mb, const char *s, size_t n, size_t *off)
{
    size_t need;
    if (sp_ckd_add_size(&need, mb->len, n))
        return false;
    if (need > mb->cap) {
        size_t cap = mb->cap ? mb->cap : 65536;
        while (cap < need)
            if (sp_ckd_mul_size(&cap, cap, 2))
                return false;
        char *p = realloc(mb->text, cap);
        if (!p)
            return false;
        mb->text = p;
        mb->cap = cap;
    }
    memcpy(mb->text + mb->len, s, n);
    *off = mb->len;
    mb->len += n;
    return true;
}

static sp_status batch_add(loader *L, merge_batch *mb, uint32_t rank, const char *a, size_t al,
                           const char *b, size_t bl)
{
    size_t skip = bl >= L->t->model.prefix_len ? L->t->model.prefix_len : bl;
    merge_item *it = &mb->it[mb->n];
    it->rank = rank;
    it->al = al;
    it->bl = bl;
    it->abl = al + bl - skip;
    size_t tmp;
    if (!batch_put(mb, a, al, &it->a) || !batch_put(mb, b, bl, &it->b) || !batch_put(mb, a, al, &it->ab) ||
        !batch_put(mb, b + skip, bl - skip, &tmp))
        return nomem(L);
    mb->n++;
    return SP_OK;
}

static sp_status batch_flush(loader *L, merge_batch *mb)
{
    sp_tok_model *m = &L->t->model;
    const sp_strmap *v = &L->t->vocab_map;
    const char *t = mb->text;
    for (size_t i = 0; i < mb->n; i++) {
        merge_item *it = &mb->it[i];
        it->ha = sp_hash_bytes(t + it->a, it->al);
        it->hb = sp_hash_bytes(t + it->b, it->bl);
        it->hab = sp_hash_bytes(t + it->ab, it->abl);
        sp_strmap_prefetch(v, it->ha);
        sp_strmap_prefetch(v, it->hb);
        sp_strmap_prefetch(v, it->hab);
    }
    for (size_t i = 0; i < mb->n; i++) {
        merge_item *it = &mb->it[i];
        int64_t ia, ib, iab;
        if (!sp_strmap_get_hashed(v, t + it->a, it->al, it->ha, &ia) ||
            !sp_strmap_get_hashed(v, t + it->b, it->bl, it->hb, &ib) ||
            !sp_strmap_get_hashed(v, t + it->ab, it->abl, it->hab, &iab))
            return sp_err(L->err, SP_ERR_FORMAT,
                          "%s: model.merges[%u]: merge '%.*s' + '%.*s' names a token that is not in "
                          "the vocabulary", L->what, it->rank, (int)(it->al > 60 ? 60 : it->al), t + it->a,
                          (int)(it->bl > 60 ? 60 : it->bl), t + it->b);
        it->ia = (int32_t)ia;
        it->ib = (int32_t)ib;
        it->iab = (int32_t)iab;
        sp_merge_prefetch(&m->merges, (uint32_t)ia, (uint32_t)ib);
    }
    for (size_t i = 0; i < mb->n; i++) {
        merge_item *it = &mb->it[i];
        if (!sp_merge_put(&m->merges, (uint32_t)it->ia, (uint32_t)it->ib, it->rank, (uint32_t)it->iab))
            return nomem(L);
    }
    mb->n = 0;
    mb->len = 0;
    return SP_OK;
}

/* model.merges: ["a b", ...] or [["a", "b"], ...], scanned in place. */
static sp_status load_merges(loader *L)
{
    if (L->merges_end <= L->merges_at)
        return SP_OK;
    sp_jscan j;
    sp_jscan_init(&j, L->raw, L->merges_end, L->what, L->err);
    j.pos = L->merges_at;
    if (sp_jscan_peek(&j) == 'n')
        return SP_OK; /* null */
    if (!sp_jscan_expect(&j, '['))
        return bad(L, "model.merges", "expected a list");
    if (!sp_merge_reserve(&L->t->model.merges, (L->merges_end - L->merges_at) / 20))
        return nomem(L);
    char *s1 = NULL, *s2 = NULL;
    size_t c1 = 0, c2 = 0, l1, l2;
    bool first = true;
    uint32_t rank = 0;
    sp_status st = SP_OK;
    merge_batch mb = {.n = 0};
    while (st == SP_OK && sp_jscan_next(&j, ']', &first)) {
        if (sp_jscan_peek(&j) == '[') {
            j.pos++;
            if (!sp_jscan_string(&j, &s1, &c1, &l1) || !sp_jscan_expect(&j, ',') ||
                !sp_jscan_string(&j, &s2, &c2, &l2) || !sp_jscan_expect(&j, ']'))
                break;
            st = batch_add(L, &mb, rank, s1, l1, s2, l2);
        } else {
            if (!sp_jscan_string(&j, &s1, &c1, &l1))
                break;
            const char *sp = memchr(s1, ' ', l1);
            if (!sp) {
                st = sp_err(L->err, SP_ERR_FORMAT, "%s: model.merges[%u]: '%.60s' is not 'a b'",
                            L->what, rank, s1);
                break;
            }
            st = batch_add(L, &mb, rank, s1, (size_t)(sp - s1), sp + 1, l1 - (size_t)(sp - s1) - 1);
        }
        rank++;
        if (st == SP_OK && mb.n == MERGE_BATCH)
            st = batch_flush(L, &mb);
    }
    if (st == SP_OK && !j.failed)
        st = batch_flush(L, &mb);
    free(mb.text);
    free(s1);
    free(s2);
    if (st == SP_OK && j.failed)
        st = L->err ? L->err->status : SP_ERR_FORMAT;
    return st;
}

static sp_status opt_string(loader *L, const cJSON *o, const char *k, char **out, size_t *len)
{
    const char *s = get_str(o, k);
    *out = NULL;
    if (len)
        *len = 0;
    if (!s || (!*s && strcmp(k, "unk_token") != 0))
        return SP_OK; /* an empty prefix/suffix is no prefix/suffix */
    if (!(*out = dup_n(s, strlen(s))))
        return nomem(L);
    if (len)
        *len = strlen(s);
    return SP_OK;
}

static sp_status load_model(loader *L, const cJSON *mo)
{
    sp_tokenizer *t = L->t;
    sp_tok_model *m = &t->model;
    if (!cJSON_IsObject(mo))
        return bad(L, "model", "missing or not an object");
    const char *ty = type_of(mo);
    bool merges = L->merges_end > L->merges_at;
    if (!ty)
        ty = merges ? "BPE" : cJSON_GetObjectItemCaseSensitive(mo, "max_input_chars_per_word")
                                  ? "WordPiece"
                                  : "WordLevel";
    if (!strcmp(ty, "BPE"))
        m->kind = SP_MODEL_BPE;
    else if (!strcmp(ty, "WordPiece"))
        m->kind = SP_MODEL_WORDPIECE;
    else if (!strcmp(ty, "WordLevel"))
        m->kind = SP_MODEL_WORDLEVEL;
    else
        return sp_err(L->err, SP_ERR_UNSUPPORTED, "%s: model type '%s' is not supported "
                      "(supported: BPE, WordPiece, WordLevel)", L->what, ty);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(mo, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble != 0.0)
        return sp_err(L->err, SP_ERR_UNSUPPORTED, "%s: model.dropout %g: BPE dropout is random and "
                      "not supported for inference", L->what, dropout->valuedouble);
    sp_status st = load_vocab(L);
    if (st != SP_OK)
        return st;
    m->fuse_unk = get_bool(mo, "fuse_unk", false);
    m->byte_fallback = get_bool(mo, "byte_fallback", false);
    m->ignore_merges = get_bool(mo, "ignore_merges", false);
    if ((st = opt_string(L, mo, "unk_token", &m->unk_token, NULL)))
        return st;
    if (m->kind == SP_MODEL_WORDPIECE) {
        const char *pre = get_str(mo, "continuing_subword_prefix");
        m->prefix_len = strlen(pre ? pre : "##");
        if (!(m->prefix = dup_n(pre ? pre : "##", m->prefix_len)))
            return nomem(L);
        if ((st = sp_json_int(mo, "max_input_chars_per_word", L->what, 100, 0, INT32_MAX,
                              &m->max_input_chars_per_word, L->err)))
            return st;
    } else if ((st = opt_string(L, mo, "continuing_subword_prefix", &m->prefix, &m->prefix_len)) ||
               (st = opt_string(L, mo, "end_of_word_suffix", &m->suffix, &m->suffix_len))) {
        return st;
    }
    m->unk_id = m->unk_token ? lookup(t, m->unk_token, strlen(m->unk_token)) : -1;
    if (m->unk_token && m->unk_id < 0 && m->kind == SP_MODEL_BPE)
        return sp_err(L->err, SP_ERR_FORMAT, "%s: model.unk_token '%s' is not in the vocabulary",
                      L->what, m->unk_token);
    for (int b = 0; b < 256; b++) {
        char code[8];
        snprintf(code, sizeof code, "<0x%02X>", b);
        m->byte_ids[b] = lookup(t, code, 6);
    }
    if (m->kind == SP_MODEL_BPE) {
        if (!(m->char_ids = malloc(CHAR_IDS * sizeof *m->char_ids)))
            return nomem(L);
        for (size_t i = 0; i < CHAR_IDS; i++)
            m->char_ids[i] = -1;
        for (int64_t id = 0; id < t->n_vocab; id++) {
            uint32_t cp;
            if (t->vocab[id] && sp_utf8_decode((const unsigned char *)t->vocab[id], t->vocab_len[id], &cp) ==
                                    t->vocab_len[id] && cp < CHAR_IDS)
                m->char_ids[cp] = (int32_t)id;
        }
        if (!(m->cache = calloc(CACHE_SLOTS, sizeof *m->cache)))
            return nomem(L);
        m->cache_cap = CACHE_SLOTS;
        st = load_merges(L);
    }
    return st;
}

/* ---- added tokens ------------------------------------------------------------------------- */

static bool trie_add(sp_trie *tr, const char *s, size_t n, int32_t token)
{
    if (!tr->nodes) {
        tr->cap = 64;
        if (!(tr->nodes = malloc(tr->cap * sizeof *tr->nodes)))
            return false;
        tr->nodes[0] = (sp_trie_node){-1, -1, 0, -1};
        tr->n = 1;
    }
    if (!n)
        return true;
    tr->first_byte[(unsigned char)s[0]] = true;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t ch = tr->nodes[node].next_first;
        while (ch >= 0 && tr->nodes[ch].byte != (uint8_t)s[i])
            ch = tr->nodes[ch].sibling;
        if (ch < 0) {
            if (tr->n == tr->cap) {
                size_t bytes; /* node indices are int32 */
                if (tr->cap >= INT32_MAX / 2 || sp_ckd_mul3_size(&bytes, tr->cap, 2, sizeof *tr->nodes))
                    return false;
                sp_trie_node *g = realloc(tr->nodes, bytes);
                if (!g)
                    return false;
                tr->nodes = g;
                tr->cap *= 2;
            }
            ch = (int32_t)tr->n++;
            tr->nodes[ch] = (sp_trie_node){-1, tr->nodes[node].next_first, (uint8_t)s[i], -1};
            tr->nodes[node].next_first = ch;
        }
        node = ch;
    }
    tr->nodes[node].token = token;
    return true;
}

static sp_status widen_vocab(loader *L, int64_t n)
{
    sp_tokenizer *t = L->t;
    if (n <= t->n_vocab)
        return SP_OK;
    char **v = realloc(t->vocab, (size_t)n * sizeof *v);
    if (!v)
        return nomem(L);
    t->vocab = v;
    uint32_t *vl = realloc(t->vocab_len, (size_t)n * sizeof *vl);
    if (!vl)
        return nomem(L);
    t->vocab_len = vl;
    for (int64_t i = t->n_vocab; i < n; i++) {
        t->vocab[i] = NULL;
        t->vocab_len[i] = 0;
    }
    t->n_vocab = n;
    return SP_OK;
}

/* Assigns ids as tokenizers' AddedVocabulary::add_tokens does when it deserializes a
 * tokenizer: the JSON ids are only checked, not trusted. A token already in the added map
 * keeps its id, one in the model vocabulary takes the model's id, and any other gets the
 * next id after the largest added id (or the model vocabulary size). */
static int32_t assign_added_id(loader *L, const char *content, size_t len, int64_t model_size)
{
    sp_tokenizer *t = L->t;
    int64_t v;
    if (sp_strmap_get(&t->added_map, content, len, &v))
        return t->added[v].id;
    if (sp_strmap_get(&t->vocab_map, content, len, &v))
        return (int32_t)v;
    int64_t max = -1;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id > max)
            max = t->added[i].id;
    if (max < 0)
        return (int32_t)model_size;
    return (int32_t)(max >= model_size || model_size == 0 ? max + 1 : model_size);
}

static sp_status load_added(loader *L, const cJSON *arr)
{
    sp_tokenizer *t = L->t;
    if (!arr || cJSON_IsNull(arr))
        arr = NULL;
    else if (!cJSON_IsArray(arr))
        return bad(L, "added_tokens", "expected a list");
    size_t n = arr ? (size_t)cJSON_GetArraySize(arr) : 0;
    int64_t model_size = (int64_t)t->vocab_map.n;
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added || !sp_strmap_init(&t->added_map, n))
        return nomem(L);
    for (const cJSON *e = arr ? arr->child : NULL; e; e = e->next) {
        int64_t json_id;
        const char *content = get_str(e, "content");
        sp_status st = sp_json_int_req(e, "id", L->what, 0, MAX_VOCAB - 1, &json_id, L->err);
        if (st != SP_OK)
            return st;
        if (!content)
            return bad(L, "added_tokens.content", "missing");
        if (!*content)
            continue; /* tokenizers ignores empty added tokens */
        sp_added_token a = {0};
        a.len = strlen(content);
        a.special = get_bool(e, "special", false);
        a.single_word = get_bool(e, "single_word", false);
        a.lstrip = get_bool(e, "lstrip", false);
        a.rstrip = get_bool(e, "rstrip", false);
        a.normalized = get_bool(e, "normalized", !a.special);
        a.id = assign_added_id(L, content, a.len, model_size);
        if (a.id < 0 || a.id >= MAX_VOCAB)
            return bad(L, "added_tokens", "too many tokens");
        int64_t prev;
        if (sp_strmap_get(&t->added_map, content, a.len, &prev)) {
            /* the same content again: the later flags win, the id stays */
            a.content = t->added[prev].content;
            free(t->added[prev].norm);
            t->added[prev] = a;
            continue;
        }
        if (!(a.content = dup_n(content, a.len)))
            return nomem(L);
        t->added[t->n_added] = a;
        if (sp_strmap_put(&t->added_map, a.content, a.len, (int64_t)t->n_added) < 0)
            return nomem(L);
        t->n_added++;
        if ((st = widen_vocab(L, (int64_t)a.id + 1)))
            return st;
    }
    return SP_OK;
}

static sp_status build_added_index(loader *L)
{
    sp_tokenizer *t = L->t;
    if (!(t->added_by_id = malloc((size_t)(t->n_vocab ? t->n_vocab : 1) * sizeof *t->added_by_id)))
        return nomem(L);
    for (int64_t i = 0; i < t->n_vocab; i++)
        t->added_by_id[i] = -1;
    if (!trie_add(&t->trie_raw, "", 0, -1) || !trie_add(&t->trie_norm, "", 0, -1))
        return nomem(L);
    sp_tok_ctx c = {0};
    sp_status st = SP_OK;
    for (size_t i = 0; i < t->n_added && st == SP_OK; i++) {
        sp_added_token *a = &t->added[i];
        t->added_by_id[a->id] = (int32_t)i;
        if (!a->normalized || !t->normalizer) {
            if (!trie_add(a->normalized ? &t->trie_norm : &t->trie_raw, a->content, a->len, (int32_t)i))
                st = nomem(L);
            continue;
        }
        size_t off = sp_ctx_append(&c, a->content, a->len), no, nn;
        if (off == SIZE_MAX) {
            st = nomem(L);
            break;
        }
        st = sp_normalize(t->normalizer, &c, off, a->len, &no, &nn, L->err);
        if (st == SP_OK && !trie_add(&t->trie_norm, c.buf + no, nn, (int32_t)i))
            st = nomem(L);
        /* tokenizers decodes a normalized added token from its normalized form */
        if (st == SP_OK && !(a->norm = dup_n(c.buf + no, nn)))
            st = nomem(L);
        a->norm_len = nn;
    }
    sp_tok_ctx_fini(&c);
    return st;
}

/* Finds model.vocab and model.merges in the raw text (their byte ranges), so that the
 * rest of the document can go through cJSON without them. */
static sp_status find_model_ranges(loader *L, size_t n)
{
    sp_jscan j;
    sp_jscan_init(&j, L->raw, n, L->what, L->err);
    char *key = NULL;
    size_t cap = 0, kl;
    bool first = true;
    if (!sp_jscan_expect(&j, '{'))
        return L->err ? L->err->status : SP_ERR_FORMAT;
    while (sp_jscan_next(&j, '}', &first)) {
        if (!sp_jscan_string(&j, &key, &cap, &kl) || !sp_jscan_expect(&j, ':'))
            break;
        if (strcmp(key, "model") != 0 || sp_jscan_peek(&j) != '{') {
            if (!sp_jscan_skip(&j))
                break;
            continue;
        }
        j.pos++;
        bool mfirst = true;
        while (sp_jscan_next(&j, '}', &mfirst)) {
            if (!sp_jscan_string(&j, &key, &cap, &kl) || !sp_jscan_expect(&j, ':'))
                break;
            sp_jscan_peek(&j);
            size_t at = j.pos;
            if (!sp_jscan_skip(&j))
                break;
            if (!strcmp(key, "vocab")) {
                L->vocab_at = at;
                L->vocab_end = j.pos;
            } else if (!strcmp(key, "merges")) {
                L->merges_at = at;
                L->merges_end = j.pos;
            }
        }
        if (j.failed)
            break;
    }
    free(key);
    return j.failed ? (L->err ? L->err->status : SP_ERR_FORMAT) : SP_OK;
}

static sp_status load_all(loader *L, const cJSON *root);

/* Loads a tokenizer from the text of tokenizer.json. */
sp_status sp_tokenizer_load_text(sp_tokenizer *t, const char *text, size_t n, const char *what,
                                 sp_error *err)
{
    loader L = {t, what, err, text, 0, 0, 0, 0};
    sp_status st = find_model_ranges(&L, n);
    if (st != SP_OK)
        return st;
    /* blank out the two large values for cJSON */
    char *rest = malloc(n + 1);
    if (!rest)
        return nomem(&L);
    memcpy(rest, text, n);
    rest[n] = '\0';
    if (L.vocab_end > L.vocab_at) {
        memset(rest + L.vocab_at, ' ', L.vocab_end - L.vocab_at);
        memcpy(rest + L.vocab_at, "{}", 2);
    }
    if (L.merges_end > L.merges_at) {
        memset(rest + L.merges_at, ' ', L.merges_end - L.merges_at);
        memcpy(rest + L.merges_at, "[]", 2);
    }
    cJSON *root;
    st = sp_json_parse(rest, n, what, &root, err);
    free(rest);
    if (st != SP_OK)
        return st;
    st = load_all(&L, root);
    cJSON_Delete(root);
    return st;
}

/* Loads everything but the vocabulary and merges from the parsed document. */
static sp_status load_all(loader *L, const cJSON *root)
{
    sp_tokenizer *t = L->t;
    const char *what = L->what;
    sp_error *err = L->err;
    if (!cJSON_IsObject(root))
        return sp_err(err, SP_ERR_FORMAT, "%s: not a JSON object", what);
    const char *dup = sp_json_duplicate_key(root);
    if (dup)
        return sp_err(err, SP_ERR_FORMAT, "%s: key '%s' appears twice", what, dup);
    sp_status st = load_model(L, cJSON_GetObjectItemCaseSensitive(root, "model"));
    if (st == SP_OK)
        st = load_added(L, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"));
    const cJSON *c;
    if (st == SP_OK && (c = cJSON_GetObjectItemCaseSensitive(root, "normalizer")) && !cJSON_IsNull(c))
        st = parse_normalizer(L, c, 0, &t->normalizer);
    if (st == SP_OK && (c = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer")) && !cJSON_IsNull(c))
        st = parse_pretok(L, c, 0, &t->pretok);
    if (st == SP_OK && (c = cJSON_GetObjectItemCaseSensitive(root, "post_processor")) && !cJSON_IsNull(c))
        st = parse_post(L, c, 0, &t->post);
    if (st == SP_OK && (c = cJSON_GetObjectItemCaseSensitive(root, "decoder")) && !cJSON_IsNull(c))
        st = parse_decoder(L, c, 0, &t->decoder);
    if (st == SP_OK)
        st = build_added_index(L);
    return st;
}
