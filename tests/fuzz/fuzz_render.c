/* fuzz_render: a kimi-probe render request (JSON text: messages, tools, thinking,
 * add_generation_prompt) rendered with the tiny checkpoint's tokenizer. Bad requests must fail
 * with a message; a rendering's ids must decode to its text. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"
#include "engine/config.h"
#include "engine/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(cond)              \
    do {                           \
        if (!(cond))               \
            __builtin_trap();      \
    } while (0)

static tokenizer *tok;

/* The tiny checkpoint, found from this file's own path (CMake compiles sources by absolute
 * path), so the target runs from any directory. */
static void load_tokenizer(void)
{
    static const char self[] = "tests/fuzz/fuzz_render.c";
    char dir[4096];
    const char *file = __FILE__;
    size_t len = strlen(file), self_len = strlen(self);
    REQUIRE(len >= self_len && len - self_len + 64 < sizeof dir);
    memcpy(dir, file, len - self_len);
    strcpy(dir + len - self_len, "tests/golden/fixtures/tiny-k25");
    model_config cfg;
    kimi_err err;
    REQUIRE(config_load(&cfg, dir, &err) == 0);
    REQUIRE(tokenizer_load(&tok, dir, &cfg, &err) == 0);
    config_free(&cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok)
        load_tokenizer();
    json_t *req = json_loadb((const char *)data, size, 0, NULL);
    if (!req)
        return 0;
    chat_conversation conv;
    chat_render_options opt;
    chat_rendering r = {0};
    kimi_err err = {0};
    chat_conversation_init(&conv);
    if (chat_request_from_json(req, &conv, &opt, &err) == 0 &&
        chat_render(tok, &conv, &opt, &r, &err) == 0) {
        char *text = NULL;
        size_t len = 0;
        REQUIRE(tokenizer_decode(tok, r.ids, r.n_ids, &text, &len, &err) == 0);
        REQUIRE(len == r.text_len && !memcmp(text, r.text, len));
        free(text);
        json_t *back = chat_conversation_to_json(&conv);
        REQUIRE(back != NULL);
        json_decref(back);
    } else {
        REQUIRE(err.code != 0 && err.msg[0]);
    }
    chat_rendering_free(&r);
    chat_conversation_free(&conv);
    json_decref(req);
    return 0;
}
