/* fuzz_session: arbitrary bytes as a session file (JSON with \u0000 allowed). Bad input must fail
 * with a message and leave the session empty; a session that loads must write out, load back
 * with the same messages, write out again to the same bytes, render to the same token ids with
 * the tiny checkpoint's tokenizer, and export to Markdown without raw NUL bytes. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "app/chat/session.h"
#include "engine/text/chat.h"
#include "tests/fuzz/fuzz_support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require_same_render(const tokenizer *tok, const session *a, const session *b)
{
    chat_render_options opt = {.thinking = a->settings.thinking, .add_generation_prompt = 1};
    chat_rendering ra = {0}, rb = {0};
    kimi_err err = {0};
    int rc_a = chat_render(tok, &a->conv, &opt, &ra, &err);
    int rc_b = chat_render(tok, &b->conv, &opt, &rb, &err);
    REQUIRE(rc_a == rc_b);
    if (!rc_a)
        REQUIRE(ra.n_ids == rb.n_ids && (!ra.n_ids || !memcmp(ra.ids, rb.ids, ra.n_ids * sizeof *ra.ids)));
    chat_rendering_free(&ra);
    chat_rendering_free(&rb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const tokenizer *tok = fuzz_tiny_tokenizer();
    session s;
    kimi_err err = {0};
    json_t *root = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
    if (!root) {
        REQUIRE(session_parse(&s, (const char *)data, size, "fuzz", &err) == KIMI_ERR_INPUT && err.msg[0]);
        REQUIRE(s.conv.n_messages == 0 && s.meta == NULL);
        session_free(&s);
        return 0;
    }
    if (session_from_json(&s, root, "fuzz", &err) == 0) {
        char *text, *again, *md;
        size_t len, len2, md_len;
        session back;
        REQUIRE(session_to_text(&s, &text, &len, &err) == 0);
        REQUIRE(session_parse(&back, text, len, "again", &err) == 0);
        REQUIRE(back.conv.n_messages == s.conv.n_messages);
        REQUIRE(back.settings.seed == s.settings.seed && back.settings.thinking == s.settings.thinking);
        REQUIRE(session_to_text(&back, &again, &len2, &err) == 0);
        REQUIRE(len2 == len && !memcmp(text, again, len));
        require_same_render(tok, &s, &back);
        REQUIRE(session_to_markdown(&s, &md, &md_len, &err) == 0 && strlen(md) == md_len);
        free(text);
        free(again);
        free(md);
        session_free(&back);
    } else {
        REQUIRE(err.code == KIMI_ERR_INPUT && !strncmp(err.msg, "fuzz", 4));
        REQUIRE(s.conv.n_messages == 0 && s.meta == NULL && s.model == NULL);
    }
    session_free(&s);
    json_decref(root);
    return 0;
}
