/* fuzz_tokenizer.c: tokenizer.json loading, then encoding and decoding random text.
 * Input: tokenizer.json, a NUL, then the text (UTF-8 or not). The text's bytes also serve
 * as token ids to decode, so ids past the vocabulary are tried too. */
#include "fuzz.h"
#include "specula.h"
#include "text/tok/tokenizer.h"
#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>

static void decode_all(sp_tokenizer *t, const int32_t *ids, size_t n)
{
    sp_error err;
    for (int skip = 0; skip < 2; skip++) {
        char *out = NULL;
        size_t len;
        if (sp_tokenizer_decode(t, ids, n, skip, &out, &len, &err) == SP_OK)
            free(out);
    }
    sp_detokenizer *d;
    if (sp_detokenizer_new(t, false, &d, &err) != SP_OK)
        return;
    /* every id is streamed: a push decodes a window of bounded length whatever the ids
     * (a run of bytes that never completes made it grow, quadratically), and the pieces
     * are complete UTF-8 */
    for (size_t i = 0; i < n; i++) {
        const char *piece;
        size_t len;
        if (sp_detokenizer_push(d, ids[i], &piece, &len, &err) != SP_OK)
            break;
        if (sp_detokenizer_window(d) > 32 || !sp_utf8_valid(piece, len, NULL))
            abort();
    }
    const char *rest;
    size_t rl;
    if (sp_detokenizer_flush(d, &rest, &rl, &err) == SP_OK && !sp_utf8_valid(rest, rl, NULL))
        abort();
    sp_detokenizer_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *json, *text;
    size_t nj, nt;
    if (fuzz_split(data, size, &json, &nj, &text, &nt))
        return 0;
    sp_tokenizer *t;
    sp_error err = {0};
    if (sp_tokenizer_from_text(json, nj, NULL, 0, &t, &err) == SP_OK) {
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            size_t n = 0;
            if (sp_tokenizer_encode(t, text, nt, special, &ids, &n, &err) == SP_OK) {
                decode_all(t, ids, n);
                free(ids);
            }
        }
        /* the text's bytes as ids, some past the vocabulary */
        size_t n = nt / 2;
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        for (size_t i = 0; ids && i < n; i++)
            ids[i] = (int32_t)((uint8_t)text[2 * i] | ((uint8_t)text[2 * i + 1] << 8)) - 8;
        if (ids)
            decode_all(t, ids, n);
        free(ids);
        sp_tokenizer_close(t);
    }
    free(json);
    free(text);
    return 0;
}
