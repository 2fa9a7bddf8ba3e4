/* fuzz_encode: tokenizer_encode on arbitrary bytes with the tiny-k25 vocabulary. The first
 * input byte chooses whether special tokens are allowed; the rest is the text. Checks that
 * the ids decode to the text with invalid UTF-8 replaced by U+FFFD, that encoding that text
 * again gives the same ids, and that the streaming decoder yields the same text. */
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/config.h"
#include "engine/tokenizer.h"

static tokenizer *tok;

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_encode: %s\n", what);
    abort();
}

/* The fixture lives beside this source file: tests/golden/fixtures/tiny-k25. */
static void load_once(void)
{
    if (tok)
        return;
    static model_config cfg;
    char here[4096], dir[4096];
    snprintf(here, sizeof here, "%s", __FILE__);
    snprintf(dir, sizeof dir, "%s/../golden/fixtures/tiny-k25", dirname(here));
    const char *model = getenv("KIMI_TINY_MODEL") ? getenv("KIMI_TINY_MODEL") : dir;
    kimi_err err = {0};
    if (config_load(&cfg, model, &err) || tokenizer_load(&tok, model, &cfg, &err)) {
        fprintf(stderr, "fuzz_encode: %s\n", err.msg);
        abort();
    }
}

/* Well-formed UTF-8 by Unicode's table 3-7. */
static int valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t b = s[i], lo = 0x80, hi = 0xBF;
        size_t len = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        if (b == 0xE0)
            lo = 0xA0;
        if (b == 0xED)
            hi = 0x9F;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F;
        for (size_t k = 1; k < len; k++, lo = 0x80, hi = 0xBF)
            if (s[i + k] < lo || s[i + k] > hi)
                return 0;
        i += len;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load_once();
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
    if (valid_utf8(data + 1, len) ? back_len != len || memcmp(back, text, len) : !valid_utf8((uint8_t *)back, back_len))
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
