/* tok_internal.h: the tokenizer's internal data model, shared by the files of the
 * tokenizer module (tok_*.c). Mirrors Hugging Face tokenizers' pipeline:
 *
 *   text -> added tokens split out (raw, then normalized) -> normalizer -> pre-tokenizer
 *        -> model (BPE / WordPiece / WordLevel) -> post-processor (with --add-special)
 *   ids  -> tokens -> decoder chain -> text
 *
 * Components are trees of tagged structs built from tokenizer.json. Text flows through
 * an arena (sp_tok_ctx.buf) as byte ranges ("pieces"), so splitting never copies and
 * transforming appends. */
#ifndef SP_TEXT_TOK_INTERNAL_H
#define SP_TEXT_TOK_INTERNAL_H

#include "text/tok/regex.h"
#include "text/tok/tokenizer.h"
#include "text/tokenizer_config.h"
#include "util/strmap.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- text arena and pieces ----------------------------------------------------------- */

typedef struct sp_piece {
    size_t off, len;  /* bytes in ctx->buf */
    int32_t token;    /* >= 0: an added token (final); -1: text still to tokenize */
    bool at_origin;   /* starts at original offset 0 (Metaspace prepend_scheme "first") */
} sp_piece;

typedef struct sp_pieces {
    sp_piece *v;
    size_t n, cap;
} sp_pieces;

typedef struct sp_tok_ctx {
    char *buf;
    size_t n, cap;
    sp_pieces a, b; /* ping-pong piece lists */
    struct sp_bpe_work *bpe; /* BPE scratch (tok_model.c), allocated on first use */
} sp_tok_ctx;

void sp_tok_ctx_fini(sp_tok_ctx *c);

bool sp_ctx_reserve(sp_tok_ctx *c, size_t extra);
/* Appends bytes to the arena; returns their offset (SIZE_MAX when out of memory). */
size_t sp_ctx_append(sp_tok_ctx *c, const char *s, size_t n);
bool sp_pieces_push(sp_pieces *p, sp_piece x);

/* ---- split patterns (Split pre-tokenizer, Replace normalizer) ------------------------ */

typedef enum sp_split_behavior {
    SP_SPLIT_REMOVED,
    SP_SPLIT_ISOLATED,
    SP_SPLIT_MERGED_PREV,
    SP_SPLIT_MERGED_NEXT,
    SP_SPLIT_CONTIGUOUS,
} sp_split_behavior;

typedef enum sp_pattern_kind {
    SP_PAT_STRING,     /* literal */
    SP_PAT_REGEX,
    SP_PAT_WHITESPACE, /* char::is_whitespace */
    SP_PAT_NUMERIC,    /* char::is_numeric */
    SP_PAT_PUNCT,      /* HF is_punc */
    SP_PAT_CHAR,       /* one code point */
} sp_pattern_kind;

typedef struct sp_pattern {
    sp_pattern_kind kind;
    char *str;
    size_t str_len;
    sp_regex *re;
    uint32_t ch;
} sp_pattern;

/* A match list covering s: (start, end, is_match) triples. */
typedef struct sp_span {
    size_t s, e;
    bool match;
} sp_span;

/* Splits s[0..n) into spans of matches and gaps, like tokenizers' Pattern::find_matches.
 * *spans is grown as needed (caller frees). */
sp_status sp_pattern_spans(const sp_pattern *p, const char *s, size_t n, bool invert,
                           sp_span **spans, size_t *n_spans, size_t *cap, sp_error *err);
/* Applies a split behavior to spans: writes kept ranges (start, end) into out. */
size_t sp_split_apply(const sp_span *spans, size_t n, sp_split_behavior b, sp_span *out);

/* ---- normalizers ------------------------------------------------------------------------- */

typedef enum sp_norm_kind {
    SP_NORM_NFC, SP_NORM_NFD, SP_NORM_NFKC, SP_NORM_NFKD,
    SP_NORM_LOWERCASE, SP_NORM_STRIP, SP_NORM_STRIP_ACCENTS, SP_NORM_REPLACE,
    SP_NORM_PREPEND, SP_NORM_APPEND, SP_NORM_SEQUENCE, SP_NORM_BERT, SP_NORM_BYTE_LEVEL,
} sp_norm_kind;

typedef struct sp_normalizer {
    sp_norm_kind kind;
    bool left, right;            /* Strip */
    sp_pattern pattern;          /* Replace */
    char *content;               /* Replace content, Prepend/Append text */
    size_t content_len;
    bool clean_text, chinese, strip_accents, lowercase; /* BertNormalizer */
    struct sp_normalizer **children;
    size_t n_children;
} sp_normalizer;

/* Normalizes s[0..n) and appends the result to the arena; returns its offset and length. */
sp_status sp_normalize(const sp_normalizer *nz, sp_tok_ctx *c, size_t off, size_t n,
                       size_t *out_off, size_t *out_len, sp_error *err);

/* ---- pre-tokenizers ---------------------------------------------------------------------- */

typedef enum sp_pretok_kind {
    SP_PRE_SPLIT, SP_PRE_BYTE_LEVEL, SP_PRE_DIGITS, SP_PRE_METASPACE, SP_PRE_PUNCTUATION,
    SP_PRE_WHITESPACE, SP_PRE_WHITESPACE_SPLIT, SP_PRE_BERT, SP_PRE_CHAR_DELIMITER,
    SP_PRE_SEQUENCE,
} sp_pretok_kind;

typedef enum sp_prepend_scheme { SP_PREPEND_ALWAYS, SP_PREPEND_FIRST, SP_PREPEND_NEVER } sp_prepend_scheme;

typedef struct sp_pretok {
    sp_pretok_kind kind;
    sp_pattern pattern;          /* Split, CharDelimiterSplit */
    sp_split_behavior behavior;  /* Split, Punctuation */
    bool invert;                 /* Split */
    bool add_prefix_space, use_regex; /* ByteLevel */
    bool individual_digits;      /* Digits */
    uint32_t replacement;        /* Metaspace */
    char repl_utf8[8];
    size_t repl_len;
    sp_prepend_scheme prepend;
    bool split;                  /* Metaspace */
    struct sp_pretok **children;
    size_t n_children;
} sp_pretok;

/* Runs the pre-tokenizer over every non-token piece of c->a, result in c->a. */
sp_status sp_pretokenize(const sp_pretok *p, const sp_tokenizer *t, sp_tok_ctx *c, sp_error *err);

/* ---- models -------------------------------------------------------------------------------- */

typedef enum sp_model_kind { SP_MODEL_BPE, SP_MODEL_WORDPIECE, SP_MODEL_WORDLEVEL } sp_model_kind;

/* Open-addressing map from (left id, right id) to (rank, merged id); one 16-byte slot
 * per entry so a probe touches one cache line. */
typedef struct sp_merge_slot {
    uint64_t key; /* (a << 32 | b) + 1, 0 = empty */
    uint32_t rank, merged;
} sp_merge_slot;

typedef struct sp_merge_map {
    sp_merge_slot *slots;
    size_t cap, n;
} sp_merge_map;

typedef struct sp_bpe_cache_entry {
    char *key;
    uint32_t key_len;
    uint32_t n_ids;
    int32_t *ids;
} sp_bpe_cache_entry;

typedef struct sp_tok_model {
    sp_model_kind kind;
    int32_t unk_id;          /* -1 when none */
    char *unk_token;
    bool fuse_unk, byte_fallback, ignore_merges;
    char *prefix, *suffix;   /* continuing_subword_prefix / end_of_word_suffix (NULL = none) */
    size_t prefix_len, suffix_len;
    sp_merge_map merges;
    int32_t byte_ids[256];   /* id of the byte token "<0x00>" .. "<0xFF>" (byte_fallback), -1 if absent */
    int32_t *char_ids;       /* id of the single-code-point token, for cp < 0x30000; -1 */
    int64_t max_input_chars_per_word; /* WordPiece */
    /* word cache: a fixed-size direct-mapped table */
    sp_bpe_cache_entry *cache;
    size_t cache_cap;
} sp_tok_model;

bool sp_merge_put(sp_merge_map *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t merged);
/* Sizes the table for `reserve` entries now; then sp_merge_prefetch may be used. */
bool sp_merge_reserve(sp_merge_map *m, size_t reserve);
void sp_merge_prefetch(const sp_merge_map *m, uint32_t a, uint32_t b);
void sp_merge_map_free(sp_merge_map *m);
void sp_bpe_cache_free(sp_tok_model *m);

sp_status sp_model_tokenize(const sp_tokenizer *t, sp_tok_ctx *c, const char *s, size_t n,
                            sp_tok_ids *out, sp_error *err);

/* ---- added tokens --------------------------------------------------------------------------- */

typedef struct sp_added_token {
    char *content;
    size_t len;
    char *norm;      /* normalized content, used for decoding normalized tokens (or NULL) */
    size_t norm_len;
    int32_t id;
    bool special, single_word, lstrip, rstrip, normalized;
} sp_added_token;

/* A byte trie over added-token contents, for leftmost-longest matching. */
typedef struct sp_trie_node {
    int32_t next_first; /* first child index or -1 */
    int32_t sibling;    /* next sibling or -1 */
    uint8_t byte;
    int32_t token;      /* index into added tokens ending here, -1 */
} sp_trie_node;

typedef struct sp_trie {
    sp_trie_node *nodes;
    size_t n, cap;
    bool first_byte[256];
} sp_trie;

/* Splits every non-token piece of c->a on the trie's tokens (single_word, lstrip, rstrip
 * as tokenizers' AddedVocabulary::find_matches). */
sp_status sp_added_split(const sp_tokenizer *t, const sp_trie *trie, sp_tok_ctx *c, sp_error *err);

/* ---- post-processors -------------------------------------------------------------------- */

typedef enum sp_post_kind { SP_POST_NONE, SP_POST_TEMPLATE, SP_POST_BYTE_LEVEL, SP_POST_BERT,
                            SP_POST_ROBERTA, SP_POST_SEQUENCE } sp_post_kind;

typedef struct sp_post {
    sp_post_kind kind;
    /* TemplateProcessing single: items are either a special token's ids or the sequence */
    struct sp_post_item {
        bool is_sequence;
        int32_t *ids;
        size_t n_ids;
    } *items;
    size_t n_items;
    struct sp_post **children;
    size_t n_children;
} sp_post;

/* ---- decoders ------------------------------------------------------------------------------- */

typedef enum sp_dec_kind {
    SP_DEC_BYTE_LEVEL, SP_DEC_METASPACE, SP_DEC_BYTE_FALLBACK, SP_DEC_FUSE, SP_DEC_STRIP,
    SP_DEC_REPLACE, SP_DEC_WORDPIECE, SP_DEC_BPE, SP_DEC_SEQUENCE,
} sp_dec_kind;

typedef struct sp_decoder {
    sp_dec_kind kind;
    char *a, *b;            /* Replace: pattern (string), content; WordPiece prefix; BPE suffix */
    size_t a_len, b_len;
    uint32_t ch;            /* Strip content, Metaspace replacement */
    int64_t start, stop;    /* Strip */
    bool prepend;           /* Metaspace: prepend_scheme != never */
    bool cleanup;           /* WordPiece */
    struct sp_decoder **children;
    size_t n_children;
} sp_decoder;

/* A list of strings being decoded. */
typedef struct sp_strlist {
    char **s;
    size_t *len;
    size_t n, cap;
} sp_strlist;

sp_status sp_decode_chain(const sp_decoder *d, sp_strlist *l, sp_error *err);
void sp_strlist_free(sp_strlist *l);
bool sp_strlist_push(sp_strlist *l, const char *s, size_t n);

/* ---- the tokenizer ---------------------------------------------------------------------- */

struct sp_tokenizer {
    char *path; /* tokenizer.json, for messages */
    char *dir;  /* directory holding it */
    sp_tok_model model;
    char **vocab;           /* id -> token string (NUL-terminated; may contain NUL bytes) */
    uint32_t *vocab_len;
    int64_t n_vocab;        /* highest id + 1 over model and added tokens */
    sp_strmap vocab_map;    /* model vocabulary: token -> id */
    char *vocab_arena;      /* storage of vocab strings */

    sp_added_token *added;
    size_t n_added;
    sp_strmap added_map;    /* content -> index in added */
    int32_t *added_by_id;   /* id -> index in added, or -1 ([n_vocab]) */
    sp_trie trie_raw, trie_norm;

    sp_normalizer *normalizer;
    sp_pretok *pretok;
    sp_post *post;
    sp_decoder *decoder;

    /* tokenizer_config.json (all zero when there is none) */
    sp_tok_config config;
    int32_t bos_id, eos_id; /* of config's bos_token / eos_token, or -1 */
    char *jinja_template;   /* chat_template.jinja beside it, or NULL */
};

void sp_normalizer_free(sp_normalizer *n);
void sp_pretok_free(sp_pretok *p);
void sp_post_free(sp_post *p);
void sp_decoder_free(sp_decoder *d);
void sp_pattern_fini(sp_pattern *p);

#endif
