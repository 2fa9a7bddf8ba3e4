/* fuzz_encode: tokenizer_encode on arbitrary bytes with the tiny-k25 vocabulary. The first
 * input byte chooses whether special tokens are allowed; the rest is the text. Checks that
 * the ids decode to the text with invalid UTF-8 replaced by U+FFFD, that encoding that text
 * again gives the same ids, and that the streaming decoder yields the same text. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_encode: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const tokenizer *tok = fuzz_tiny_tokenizer();
    if (size == 0)
        return 0;
    int allow_special = data[0] & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL, *again = NULL;
    size_t n = 0, n_again = 0, back_len = 0;
    char *back = NULL;
    kimi_err err = {0};
    if (tokenizer_encode(tok, text, len, allow_special, &ids, &n, &err))
        fail(err.msg);
    if (tokenizer_decode(tok, ids, n, &back, &back_len, &err))
        fail(err.msg);
    /* the text itself when it is valid UTF-8; otherwise valid UTF-8 with U+FFFD replacements */
    if (fuzz_valid_utf8(data + 1, len) ? back_len != len || memcmp(back, text, len) : !fuzz_valid_utf8((uint8_t *)back, back_len))
        fail("decoded text");
    if (tokenizer_encode(tok, back, back_len, allow_special, &again, &n_again, &err))
        fail(err.msg);
    if (n_again != n || (n && memcmp(again, ids, n * sizeof *ids)))
        fail("encoding the decoded text gives other ids");

    token_stream ts;
    token_stream_init(&ts, tok);
    size_t cap = token_stream_min_cap(tok), total = 0;
    char *piece = malloc(cap), *streamed = malloc(back_len + cap + 1);
    if (!piece || !streamed)
        fail("out of memory");
    for (size_t i = 0; i <= n; i++) {
        size_t got = i < n ? token_stream_push(&ts, ids[i], piece, cap) : token_stream_flush(&ts, piece, cap);
        if (total + got > back_len)
            fail("stream longer than the text");
        memcpy(streamed + total, piece, got);
        total += got;
    }
    if (total != back_len || memcmp(streamed, back, back_len))
        fail("stream differs from decode");
    free(piece);
    free(streamed);
    free(back);
    free(again);
    free(ids);
    return 0;
}
