/* golden_chat: kimi-probe golden --only chat, every case of chat_cases.jsonl rendered and compared
 * exactly: the ids with ids_literal (special tokens only from the template structure) and the
 * text with the template's string. */
#include "app/probe/golden.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat.h"
#include "engine/model/config.h"
#include "engine/text/tokenizer.h"

/* Compare the rendering with the case; detail says where they first differ. */
static int compare_case(const chat_rendering *r, const json_t *c, char *detail, size_t cap)
{
    const char *text = json_string_value(json_object_get(c, "text"));
    const json_t *ids = json_object_get(c, "ids_literal");
    if (!text || !json_is_array(ids)) {
        snprintf(detail, cap, "case has no text or ids_literal");
        return 0;
    }
    size_t n = json_array_size(ids);
    for (size_t i = 0; i < n && i < r->n_ids; i++) {
        json_int_t want = json_integer_value(json_array_get(ids, i));
        if (r->ids[i] != want) {
            snprintf(detail, cap, "id %zu is %d, expected %lld (%zu ids, expected %zu)", i,
                     (int)r->ids[i], (long long)want, r->n_ids, n);
            return 0;
        }
    }
    if (r->n_ids != n) {
        snprintf(detail, cap, "%zu ids, expected %zu", r->n_ids, n);
        return 0;
    }
    size_t len = strlen(text), at = 0;
    while (at < len && at < r->text_len && text[at] == r->text[at])
        at++;
    if (at < len || at < r->text_len) {
        snprintf(detail, cap, "ids equal but the text differs at byte %zu", at);
        return 0;
    }
    snprintf(detail, cap, "%zu ids", n);
    return 1;
}

static void run_case(golden_run *g, const tokenizer *tok, const char *line, size_t len, int line_no)
{
    char name[128], detail[512];
    kimi_err err = {0};
    json_error_t jerr;
    json_t *c = json_loadb(line, len, 0, &jerr);
    snprintf(name, sizeof name, "chat/%s",
             c && json_string_value(json_object_get(c, "name")) ? json_string_value(json_object_get(c, "name")) : "?");
    if (!c) {
        golden_case(g, 0, name, "chat_cases.jsonl line %d: invalid JSON: %s", line_no, jerr.text);
        return;
    }
    chat_conversation conv;
    chat_render_options opt;
    chat_rendering r = {0};
    chat_conversation_init(&conv);
    if (chat_request_from_json(c, &conv, &opt, &err) || chat_render(tok, &conv, &opt, &r, &err))
        golden_case(g, 0, name, "%s", err.msg);
    else
        golden_case(g, compare_case(&r, c, detail, sizeof detail), name, "%s", detail);
    chat_rendering_free(&r);
    chat_conversation_free(&conv);
    json_decref(c);
}

int golden_chat(golden_run *g, kimi_err *err)
{
    model_config cfg;
    tokenizer *tok = NULL;
    char *data = NULL;
    size_t bytes;
    if (config_load(&cfg, g->model_dir, err))
        return err->code;
    int rc = tokenizer_load(&tok, g->model_dir, &cfg, err);
    if (!rc)
        rc = golden_read_file(g, "chat_cases.jsonl", (void **)&data, &bytes, err);
    int line_no = 0, cases = 0;
    for (char *line = data; !rc && line && line < data + bytes;) {
        char *end = memchr(line, '\n', (size_t)(data + bytes - line));
        size_t len = end ? (size_t)(end - line) : (size_t)(data + bytes - line);
        line_no++;
        if (strspn(line, " \t\r") < len) {
            run_case(g, tok, line, len, line_no);
            cases++;
        }
        line = end ? end + 1 : NULL;
    }
    if (!rc && !cases)
        rc = kimi_fail(err, KIMI_ERR_INPUT, "%s/chat_cases.jsonl: no cases", g->reference_dir);
    free(data);
    tokenizer_free(tok);
    config_free(&cfg);
    return rc;
}
