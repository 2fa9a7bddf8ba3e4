/* fuzz_render: a kimi-probe render request (JSON text: messages, tools, thinking,
 * add_generation_prompt) rendered with the tiny checkpoint's tokenizer. Bad requests must fail
 * with a message; a rendering's ids must decode to its text. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat.h"
#include "engine/text/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);



int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const tokenizer *tok = fuzz_tiny_tokenizer();
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
