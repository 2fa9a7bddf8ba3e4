/* fuzz_support: what several fuzz targets share: REQUIRE, the tiny-k25 tokenizer (the checkpoint's path
 * comes from the build, KIMI_TINY_MODEL_DIR) and a strict UTF-8 well-formedness check. */
#ifndef KIMI_FUZZ_SUPPORT_H
#define KIMI_FUZZ_SUPPORT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/model/config.h"
#include "engine/text/tokenizer.h"

/* A failed expectation crashes the target, which is how libFuzzer learns of it. */
#define REQUIRE(cond)              \
    do {                           \
        if (!(cond))               \
            __builtin_trap();      \
    } while (0)

/* Loaded once per process; a failure to load the fixture aborts the fuzzer loudly. */
static tokenizer *fuzz_tiny_tokenizer(void)
{
    static tokenizer *tok;
    if (tok)
        return tok;
    model_config cfg;
    kimi_err err = {0};
    if (config_load(&cfg, KIMI_TINY_MODEL_DIR, &err) ||
        tokenizer_load(&tok, KIMI_TINY_MODEL_DIR, &cfg, &err)) {
        fprintf(stderr, "fuzz: %s\n", err.msg);
        abort();
    }
    config_free(&cfg);
    return tok;
}

/* Well-formed UTF-8 by Unicode's table 3-7. */
static inline int fuzz_valid_utf8(const uint8_t *s, size_t n)
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

#endif
