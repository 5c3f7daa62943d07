/* tokenizer.c: opening tokenizers (tokenizer.json + tokenizer_config.json), the encode
 * pipeline, decoding, and the streaming detokenizer (see tokenizer.h, specula.h). */
#include "text/tok/tokenizer.h"
#include "text/tok/tok_internal.h"
#include "util/error.h"
#include "util/fileio.h"
#include "util/json.h"
#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>

#define TOKENIZER_MAX_BYTES (512u << 20)
#define CONFIG_MAX_BYTES (64u << 20)

sp_status sp_tokenizer_load_text(sp_tokenizer *t, const char *text, size_t n, const char *what,
                                 sp_error *err);

/* ---- lifetime ------------------------------------------------------------------------- */

void sp_tokenizer_close(sp_tokenizer *t)
{
    if (!t)
        return;
    sp_tok_model *m = &t->model;
    free(m->unk_token);
    free(m->prefix);
    free(m->suffix);
    free(m->char_ids);
    sp_merge_map_free(&m->merges);
    sp_bpe_cache_free(m);
    free(t->vocab);
    free(t->vocab_len);
    free(t->vocab_arena);
    sp_strmap_fini(&t->vocab_map);
    for (size_t i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].norm);
    }
    free(t->added);
    sp_strmap_fini(&t->added_map);
    free(t->added_by_id);
    free(t->trie_raw.nodes);
    free(t->trie_norm.nodes);
    sp_normalizer_free(t->normalizer);
    sp_pretok_free(t->pretok);
    sp_post_free(t->post);
    sp_decoder_free(t->decoder);
    sp_tok_config_fini(&t->config);
    free(t->jinja_template);
    free(t->path);
    free(t->dir);
    free(t);
}

/* tokenizer_config.json (optional; tokenizer_config.h reads it) and the
 * chat_template.jinja that transformers saves beside it. */
static sp_status load_config(sp_tokenizer *t, const char *cfg_path, const char *dir,
                             sp_error *err)
{
    if (cfg_path && sp_file_exists(cfg_path)) {
        sp_status st = sp_tok_config_load(cfg_path, &t->config, err);
        if (st != SP_OK)
            return st;
    }
    const char *bos = sp_tok_config_special(&t->config, "bos_token");
    const char *eos = sp_tok_config_special(&t->config, "eos_token");
    t->bos_id = bos ? sp_tokenizer_token_id(t, bos) : -1;
    t->eos_id = eos ? sp_tokenizer_token_id(t, eos) : -1;
    char *jp = dir ? sp_path_join(dir, "chat_template.jinja") : NULL;
    sp_status st = SP_OK;
    if (jp && sp_file_exists(jp))
        st = sp_read_file(jp, CONFIG_MAX_BYTES, &t->jinja_template, NULL, err);
    free(jp);
    return st;
}

/* Resolves PATH to tokenizer.json, its directory, and tokenizer_config.json. */
static sp_status resolve(const char *path, char **json, char **dir, sp_error *err)
{
    *json = *dir = NULL;
    if (sp_dir_exists(path)) {
        *dir = strdup(path);
        *json = sp_path_join(path, "tokenizer.json");
    } else {
        *json = strdup(path);
        const char *slash = strrchr(path, '/');
        *dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    }
    if (!*json || !*dir) {
        free(*json);
        free(*dir);
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    return SP_OK;
}

sp_status sp_tokenizer_open(const char *path, sp_tokenizer **out, sp_error *err)
{
    *out = NULL;
    char *json_path, *dir;
    sp_status st = resolve(path, &json_path, &dir, err);
    if (st != SP_OK)
        return st;
    sp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        free(json_path);
        free(dir);
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    t->path = json_path;
    t->dir = dir;
    t->bos_id = t->eos_id = -1;
    char *text = NULL;
    size_t n = 0;
    st = sp_read_file(t->path, TOKENIZER_MAX_BYTES, &text, &n, err);
    if (st == SP_OK)
        st = sp_tokenizer_load_text(t, text, n, t->path, err);
    free(text);
    if (st == SP_OK) {
        char *cfg_path = sp_path_join(dir, "tokenizer_config.json");
        st = cfg_path ? load_config(t, cfg_path, dir, err) : sp_err(err, SP_ERR_NOMEM, "out of memory");
        free(cfg_path);
    }
    if (st != SP_OK) {
        sp_tokenizer_close(t);
        return st;
    }
    *out = t;
    return SP_OK;
}

sp_status sp_tokenizer_from_text(const char *json, size_t n, const char *config_json,
                                 size_t config_len, sp_tokenizer **out, sp_error *err)
{
    *out = NULL;
    sp_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    t->bos_id = t->eos_id = -1;
    sp_status st = sp_tokenizer_load_text(t, json, n, "tokenizer.json", err);
    if (st == SP_OK && config_json)
        st = sp_tok_config_parse(config_json, config_len, "tokenizer_config.json", &t->config, err);
    if (st == SP_OK)
        st = load_config(t, NULL, NULL, err);
    if (st != SP_OK) {
        sp_tokenizer_close(t);
        return st;
    }
    *out = t;
    return SP_OK;
}

/* ---- lookups ------------------------------------------------------------------------- */

int64_t sp_tokenizer_n_vocab(const sp_tokenizer *t) { return t->n_vocab; }
int32_t sp_tokenizer_bos_id(const sp_tokenizer *t) { return t->bos_id; }
int32_t sp_tokenizer_eos_id(const sp_tokenizer *t) { return t->eos_id; }
const char *sp_tokenizer_dir(const sp_tokenizer *t) { return t->dir; }
const void *sp_tokenizer_config_json(const sp_tokenizer *t) { return t->config.json; }

const char *sp_tokenizer_id_to_token(const sp_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    if (t->added_by_id && t->added_by_id[id] >= 0) {
        const sp_added_token *a = &t->added[t->added_by_id[id]];
        *len = a->len;
        return a->content;
    }
    if (!t->vocab[id])
        return NULL;
    *len = t->vocab_len[id];
    return t->vocab[id];
}

const char *sp_tokenizer_model_type(const sp_tokenizer *t)
{
    switch (t->model.kind) {
    case SP_MODEL_BPE: return "BPE";
    case SP_MODEL_WORDPIECE: return "WordPiece";
    case SP_MODEL_WORDLEVEL: return "WordLevel";
    }
    return "?";
}

int32_t sp_tokenizer_token_id(const sp_tokenizer *t, const char *token)
{
    int64_t v;
    size_t n = strlen(token);
    if (sp_strmap_get(&t->added_map, token, n, &v))
        return t->added[v].id;
    return sp_strmap_get(&t->vocab_map, token, n, &v) ? (int32_t)v : -1;
}

const char *sp_tokenizer_special(const sp_tokenizer *t, const char *name)
{
    return sp_tok_config_special(&t->config, name);
}

const char *sp_tokenizer_chat_template(const sp_tokenizer *t, const char *name)
{
    const char *named = name ? sp_tok_config_template(&t->config, name) : NULL;
    if (named)
        return named;
    return t->jinja_template ? t->jinja_template : sp_tok_config_template(&t->config, "default");
}

/* ---- encoding -------------------------------------------------------------------------- */

static sp_status post_process(const sp_post *p, sp_tok_ids *ids, size_t first, sp_error *err)
{
    if (p->kind == SP_POST_SEQUENCE) {
        for (size_t i = 0; i < p->n_children; i++) {
            sp_status st = post_process(p->children[i], ids, first, err);
            if (st != SP_OK)
                return st;
        }
        return SP_OK;
    }
    if (p->kind != SP_POST_TEMPLATE)
        return SP_OK;
    size_t n_seq = ids->n - first, total = 0;
    for (size_t i = 0; i < p->n_items; i++)
        total += p->items[i].is_sequence ? n_seq : p->items[i].n_ids;
    int32_t *seq = malloc((n_seq ? n_seq : 1) * sizeof *seq);
    if (!seq)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    if (n_seq)
        memcpy(seq, ids->v + first, n_seq * sizeof *seq);
    ids->n = first;
    bool ok = true;
    for (size_t i = 0; i < p->n_items && ok; i++) {
        const int32_t *src = p->items[i].is_sequence ? seq : p->items[i].ids;
        size_t k = p->items[i].is_sequence ? n_seq : p->items[i].n_ids;
        for (size_t j = 0; j < k && ok; j++)
            ok = sp_tok_ids_push(ids, src[j]);
    }
    free(seq);
    (void)total;
    return ok ? SP_OK : sp_err(err, SP_ERR_NOMEM, "out of memory");
}

static sp_status run_pipeline(sp_tokenizer *t, sp_tok_ctx *c, const char *text, size_t len,
                              sp_tok_ids *out, sp_error *err)
{
    size_t off = sp_ctx_append(c, text, len);
    if (off == SIZE_MAX)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    if (len && !sp_pieces_push(&c->a, (sp_piece){off, len, -1, true}))
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    sp_status st = sp_added_split(t, &t->trie_raw, c, err);
    for (size_t i = 0; st == SP_OK && t->normalizer && i < c->a.n; i++) {
        sp_piece *pc = &c->a.v[i];
        if (pc->token >= 0)
            continue;
        size_t no, nn;
        st = sp_normalize(t->normalizer, c, pc->off, pc->len, &no, &nn, err);
        pc = &c->a.v[i];
        pc->off = no;
        pc->len = nn;
    }
    if (st == SP_OK)
        st = sp_added_split(t, &t->trie_norm, c, err);
    if (st == SP_OK && t->pretok)
        st = sp_pretokenize(t->pretok, t, c, err);
    for (size_t i = 0; st == SP_OK && i < c->a.n; i++) {
        sp_piece pc = c->a.v[i];
        if (pc.token >= 0)
            st = sp_tok_ids_push(out, pc.token) ? SP_OK : sp_err(err, SP_ERR_NOMEM, "out of memory");
        else
            st = sp_model_tokenize(t, c, c->buf + pc.off, pc.len, out, err);
    }
    return st;
}

sp_status sp_tokenizer_encode_into(sp_tokenizer *t, const char *text, size_t len,
                                   bool add_special, sp_tok_ids *out, sp_error *err)
{
    size_t bad;
    if (!sp_utf8_valid(text, len, &bad))
        return sp_err(err, SP_ERR_INVALID_ARG, "input text is not valid UTF-8 (byte %zu)", bad);
    sp_tok_ctx c = {0};
    size_t first = out->n;
    sp_error e = {0};
    sp_status st = run_pipeline(t, &c, text, len, out, &e);
    sp_tok_ctx_fini(&c);
    if (st == SP_OK && add_special && t->post)
        st = post_process(t->post, out, first, &e);
    if (st != SP_OK) /* a pipeline failure (a regex's match limit) names the tokenizer */
        return sp_err(err, st, "%s: %s", t->path ? t->path : "tokenizer", e.msg);
    return st;
}

sp_status sp_tokenizer_encode(sp_tokenizer *t, const char *text, size_t len, bool add_special,
                              int32_t **ids, size_t *n_ids, sp_error *err)
{
    sp_tok_ids out = {0};
    sp_status st = sp_tokenizer_encode_into(t, text, len, add_special, &out, err);
    if (st != SP_OK) {
        free(out.v);
        *ids = NULL;
        *n_ids = 0;
        return st;
    }
    if (!out.v && !(out.v = malloc(sizeof *out.v)))
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    *ids = out.v;
    *n_ids = out.n;
    return SP_OK;
}

/* Whether the post-processor itself starts sequences with BOS. */
static bool post_adds_bos(const sp_post *p, int32_t bos)
{
    if (!p)
        return false;
    if (p->kind == SP_POST_SEQUENCE) {
        for (size_t i = 0; i < p->n_children; i++)
            if (post_adds_bos(p->children[i], bos))
                return true;
        return false;
    }
    return p->kind == SP_POST_TEMPLATE && p->n_items && !p->items[0].is_sequence &&
           p->items[0].n_ids && p->items[0].ids[0] == bos;
}

sp_status sp_tokenizer_encode_prompt(sp_tokenizer *t, const char *text, size_t len,
                                     int32_t **ids, size_t *n_ids, sp_error *err)
{
    sp_tok_ids out = {0};
    bool bos = t->config.add_bos && t->bos_id >= 0 && !post_adds_bos(t->post, t->bos_id);
    sp_status st = bos && !sp_tok_ids_push(&out, t->bos_id) ? sp_err(err, SP_ERR_NOMEM, "out of memory")
                                                            : SP_OK;
    if (st == SP_OK)
        st = sp_tokenizer_encode_into(t, text, len, true, &out, err);
    if (st == SP_OK && t->config.add_eos && t->eos_id >= 0 && !sp_tok_ids_push(&out, t->eos_id))
        st = sp_err(err, SP_ERR_NOMEM, "out of memory");
    if (st != SP_OK) {
        free(out.v);
        *ids = NULL;
        *n_ids = 0;
        return st;
    }
    *ids = out.v;
    *n_ids = out.n;
    return SP_OK;
}

/* ---- decoding ------------------------------------------------------------------------------- */

static sp_status token_strings(const sp_tokenizer *t, const int32_t *ids, size_t n,
                               bool skip_special, sp_strlist *l, sp_error *err)
{
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab)
            return sp_err(err, SP_ERR_INVALID_ARG, "token id %d at position %zu is outside the "
                          "vocabulary [0, %lld)", id, i, (long long)t->n_vocab);
        int32_t a = t->added_by_id[id];
        const char *s;
        size_t len;
        if (a >= 0) {
            if (skip_special && t->added[a].special)
                continue;
            s = t->added[a].norm ? t->added[a].norm : t->added[a].content;
            len = t->added[a].norm ? t->added[a].norm_len : t->added[a].len;
        } else if (t->vocab[id]) {
            s = t->vocab[id];
            len = t->vocab_len[id];
        } else {
            return sp_err(err, SP_ERR_INVALID_ARG, "token id %d at position %zu has no token "
                          "in the vocabulary", id, i);
        }
        if (!sp_strlist_push(l, s, len))
            return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    return SP_OK;
}

sp_status sp_tokenizer_decode(sp_tokenizer *t, const int32_t *ids, size_t n_ids,
                              bool skip_special, char **text, size_t *len, sp_error *err)
{
    *text = NULL;
    sp_strlist l = {0};
    sp_status st = token_strings(t, ids, n_ids, skip_special, &l, err);
    if (st == SP_OK && t->decoder)
        st = sp_decode_chain(t->decoder, &l, err);
    size_t total = 0;
    for (size_t i = 0; st == SP_OK && i < l.n; i++)
        total += l.len[i] + 1;
    char *s = st == SP_OK ? malloc(total + 1) : NULL;
    if (st == SP_OK && !s)
        st = sp_err(err, SP_ERR_NOMEM, "out of memory");
    if (st == SP_OK) {
        size_t o = 0;
        for (size_t i = 0; i < l.n; i++) {
            if (!t->decoder && i) /* no decoder: tokens joined by spaces */
                s[o++] = ' ';
            memcpy(s + o, l.s[i], l.len[i]);
            o += l.len[i];
        }
        s[o] = '\0';
        *text = s;
        if (len)
            *len = o;
    }
    sp_strlist_free(&l);
    return st;
}

/* ---- streaming ----------------------------------------------------------------------------- */

/* Keeps a window of recent ids; text for a new id is decode(window + id) minus
 * decode(window), emitted once it does not end in an incomplete character (U+FFFD) and
 * still begins with the text already emitted, as tokenizers' DecodeStream. After each
 * emission the window slides to the last DETOK_CONTEXT ids, the context that decoders
 * such as Metaspace and Strip need to render the next token as in a full decode.
 *
 * Every push decodes the whole window, so the window must stay short. DecodeStream lets
 * it grow while the text stays incomplete, which makes a run of bytes that never forms a
 * character (or a token that rewrites text already emitted, such as a byte that turns a
 * byte-fallback run invalid) quadratic: 3,500 such ids took 12 s. Here at most
 * DETOK_MAX_PENDING ids wait; then the bytes are judged never to complete and the text is
 * emitted as a full decode renders it, with U+FFFD (see force_emit). So a push decodes at
 * most DETOK_CONTEXT + DETOK_MAX_PENDING ids. */
enum {
    DETOK_CONTEXT = 4,
    /* a character is at most 4 bytes, so at most 4 tokens; the rest is slack for tokens
     * that decode to nothing (skipped special tokens) between its bytes */
    DETOK_MAX_PENDING = 16,
};

struct sp_detokenizer {
    sp_tokenizer *t;
    bool skip_special;
    sp_tok_ids ids;   /* window: ids[start..n) (ids before start are dropped now and then) */
    size_t start;     /* first id of the window */
    size_t read;      /* ids before `read` are reflected in emitted text */
    char *prefix;     /* decode(ids[start..read]) */
    size_t prefix_len;
    char *out;        /* last emitted text */
};

sp_status sp_detokenizer_new(sp_tokenizer *t, bool skip_special, sp_detokenizer **out,
                             sp_error *err)
{
    sp_detokenizer *d = calloc(1, sizeof *d);
    if (!d)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    d->t = t;
    d->skip_special = skip_special;
    *out = d;
    return SP_OK;
}

void sp_detokenizer_free(sp_detokenizer *d)
{
    if (!d)
        return;
    free(d->ids.v);
    free(d->prefix);
    free(d->out);
    free(d);
}

size_t sp_detokenizer_window(const sp_detokenizer *d)
{
    return d->ids.n - d->start;
}

static sp_status decode_range(sp_detokenizer *d, size_t from, size_t to, char **s, size_t *n,
                              sp_error *err)
{
    return sp_tokenizer_decode(d->t, d->ids.v + from, to - from, d->skip_special, s, n, err);
}

/* Makes s[0..n) the emitted piece (copied; s stays the caller's). */
static sp_status set_out(sp_detokenizer *d, const char *s, size_t n, const char **text,
                         size_t *len, sp_error *err)
{
    free(d->out);
    d->out = malloc(n + 1);
    if (!d->out)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    memcpy(d->out, s, n);
    d->out[n] = '\0';
    *text = d->out;
    *len = n;
    return SP_OK;
}

/* Whether `full` (the decoded window) extends the text already emitted for it. */
static bool extends_prefix(const sp_detokenizer *d, const char *full, size_t fl)
{
    return fl >= d->prefix_len && (!d->prefix_len || memcmp(full, d->prefix, d->prefix_len) == 0);
}

/* All ids are now emitted: the window keeps the last DETOK_CONTEXT of them as context and
 * `prefix` becomes their text (`full` is decode(ids[start..n)) and is consumed). Drops
 * the ids before the window once they are as many as the ids kept, so memory stays
 * bounded too. */
static sp_status slide(sp_detokenizer *d, char *full, size_t fl, sp_error *err)
{
    d->read = d->ids.n;
    if (d->read - d->start > DETOK_CONTEXT + 2) {
        d->start = d->read - DETOK_CONTEXT;
        free(full);
        full = NULL;
        sp_status st = decode_range(d, d->start, d->read, &full, &fl, err);
        if (st != SP_OK) {
            free(d->prefix);
            d->prefix = NULL;
            d->prefix_len = 0;
            return st;
        }
    }
    free(d->prefix);
    d->prefix = full;
    d->prefix_len = fl;
    if (d->start >= 64 && d->start >= d->ids.n - d->start) {
        memmove(d->ids.v, d->ids.v + d->start, (d->ids.n - d->start) * sizeof *d->ids.v);
        d->ids.n -= d->start;
        d->read -= d->start;
        d->start = 0;
    }
    return SP_OK;
}

/* Emits the ids not yet emitted whether or not their text is complete: decode(window)
 * minus the text already emitted when it extends it; when a later id rewrote that text
 * (which cannot be taken back), the pending ids decoded on their own. Either way an
 * incomplete character comes out as U+FFFD, as a full decode renders it. */
static sp_status force_emit(sp_detokenizer *d, char *full, size_t fl, const char **text,
                            size_t *len, sp_error *err)
{
    sp_status st;
    if (extends_prefix(d, full, fl)) {
        st = set_out(d, full + d->prefix_len, fl - d->prefix_len, text, len, err);
    } else {
        char *own;
        size_t ol;
        st = decode_range(d, d->read, d->ids.n, &own, &ol, err);
        if (st == SP_OK) {
            st = set_out(d, own, ol, text, len, err);
            free(own);
        }
    }
    if (st != SP_OK) {
        free(full);
        return st;
    }
    return slide(d, full, fl, err);
}

sp_status sp_detokenizer_push(sp_detokenizer *d, int32_t id, const char **text, size_t *len,
                              sp_error *err)
{
    *text = "";
    *len = 0;
    if (!sp_tok_ids_push(&d->ids, id))
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    char *full;
    size_t fl;
    sp_status st = decode_range(d, d->start, d->ids.n, &full, &fl, err);
    if (st != SP_OK) {
        d->ids.n--;
        return st;
    }
    bool incomplete = fl >= 3 && memcmp(full + fl - 3, "\xef\xbf\xbd", 3) == 0;
    if (incomplete || !extends_prefix(d, full, fl)) {
        if (d->ids.n - d->read >= DETOK_MAX_PENDING)
            return force_emit(d, full, fl, text, len, err);
        free(full);
        return SP_OK; /* wait for more bytes */
    }
    st = set_out(d, full + d->prefix_len, fl - d->prefix_len, text, len, err);
    if (st != SP_OK) {
        free(full);
        return st;
    }
    return slide(d, full, fl, err);
}

sp_status sp_detokenizer_flush(sp_detokenizer *d, const char **text, size_t *len,
                               sp_error *err)
{
    *text = "";
    *len = 0;
    if (d->read == d->ids.n)
        return SP_OK;
    char *full;
    size_t fl;
    sp_status st = decode_range(d, d->start, d->ids.n, &full, &fl, err);
    if (st != SP_OK)
        return st;
    return force_emit(d, full, fl, text, len, err);
}
