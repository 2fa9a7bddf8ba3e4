/* test_chat: the conversation model, its JSON form, and rendering against the golden chat cases
 * (ids_literal and text exactly) and against Hugging Face renderings of further cases. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat.h"
#include "engine/text/tool_declaration.h"
#include "engine/model/config.h"
#include "engine/text/tokenizer.h"
#include "tests/unit/check.h"

#define TINY "tests/golden/fixtures/tiny-k25"
#define GOLDEN_CASES "tests/golden/reference/tiny-k25/chat_cases.jsonl"
/* Expected texts rendered by the checkpoint's chat_template.jinja in Python (jinja2) with the
 * K2.5 tokenizer's own TypeScript tool encoder: see tests/unit/chat_render_cases.py. */
#define EXTRA_CASES "tests/unit/data/chat_render_cases.jsonl"

static const char *const specials[] = {
    "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>", "<think>",
    "</think>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
    "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
};

typedef void (*case_fn)(const tokenizer *tok, const json_t *c, const char *name);

static int for_each_case(const char *path, const tokenizer *tok, case_fn fn)
{
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t jerr;
        json_t *c = json_loads(line, 0, &jerr);
        CHECK_MSG(c != NULL, "%s: %s", path, jerr.text);
        if (!c)
            continue;
        fn(tok, c, json_string_value(json_object_get(c, "name")));
        json_decref(c);
        n++;
    }
    free(line);
    fclose(f);
    return n;
}

static int render_case(const tokenizer *tok, const json_t *c, chat_rendering *r)
{
    chat_conversation conv;
    chat_render_options opt;
    kimi_err err = {0};
    chat_conversation_init(&conv);
    int rc = chat_request_from_json(c, &conv, &opt, &err);
    if (!rc)
        rc = chat_render(tok, &conv, &opt, r, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    chat_conversation_free(&conv);
    return rc;
}

static int ids_equal(const chat_rendering *r, const json_t *ids)
{
    if (json_array_size(ids) != r->n_ids)
        return 0;
    for (size_t i = 0; i < r->n_ids; i++)
        if (json_integer_value(json_array_get(ids, i)) != r->ids[i])
            return 0;
    return 1;
}

static size_t count_id(const chat_rendering *r, int32_t id)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_ids; i++)
        n += r->ids[i] == id;
    return n;
}

static void check_golden_case(const tokenizer *tok, const json_t *c, const char *name)
{
    chat_rendering r;
    if (render_case(tok, c, &r))
        return;
    CHECK_MSG(!strcmp(r.text, json_string_value(json_object_get(c, "text"))), "%s: text differs", name);
    CHECK_MSG(ids_equal(&r, json_object_get(c, "ids_literal")), "%s: ids differ from ids_literal", name);
    /* Where the message spells special tokens, Hugging Face's ids turn them into specials and
     * ours must not: the two differ exactly there. */
    int32_t im_end = tokenizer_special_id(tok, "<|im_end|>");
    const json_t *hf = json_object_get(c, "ids");
    size_t hf_im_end = 0;
    for (size_t i = 0; i < json_array_size(hf); i++)
        hf_im_end += json_integer_value(json_array_get(hf, i)) == im_end;
    if (!strcmp(name, "special_text_in_user")) {
        CHECK_INT(count_id(&r, im_end), 1);
        CHECK_INT(hf_im_end, 2);
    } else {
        CHECK_MSG(ids_equal(&r, hf), "%s: ids differ from Hugging Face's", name);
    }
    chat_rendering_free(&r);

    /* Without a tokenizer: the same text and no ids. */
    if (render_case(NULL, c, &r))
        return;
    CHECK_MSG(!strcmp(r.text, json_string_value(json_object_get(c, "text"))), "%s: text-only differs", name);
    CHECK(r.ids == NULL && r.n_ids == 0);
    chat_rendering_free(&r);
}

static void check_extra_case(const tokenizer *tok, const json_t *c, const char *name)
{
    chat_rendering r;
    if (render_case(tok, c, &r))
        return;
    const char *want = json_string_value(json_object_get(c, "text"));
    CHECK_MSG(!strcmp(r.text, want), "%s: text differs:\n--- got\n%s\n--- expected\n%s", name, r.text, want);
    /* The ids spell the text, and only the template's own specials are special ids. */
    char *decoded = NULL;
    size_t len = 0;
    kimi_err err = {0};
    CHECK(tokenizer_decode(tok, r.ids, r.n_ids, &decoded, &len, &err) == 0);
    CHECK_MSG(decoded && len == r.text_len && !memcmp(decoded, r.text, len), "%s: ids do not decode to the text", name);
    free(decoded);
    size_t n_special = 0;
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        n_special += count_id(&r, tokenizer_special_id(tok, specials[i]));
    CHECK_MSG((long long)n_special == json_integer_value(json_object_get(c, "n_structural_specials")),
              "%s: %zu special ids", name, n_special);
    chat_rendering_free(&r);
}

static json_t *parse_json(const char *text)
{
    json_error_t jerr;
    json_t *v = json_loads(text, 0, &jerr);
    CHECK_MSG(v != NULL, "test JSON: %s", jerr.text);
    return v;
}

static void test_message_json(void)
{
    json_t *in = parse_json(
        "[{\"role\": \"developer\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]},"
        " {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"why\", \"tool_calls\": ["
        "   {\"id\": \"functions.get_weather:0\", \"type\": \"function\", \"function\": {\"arguments\": {\"b\": 1.0, \"a\": [\"\\u00e9\", null]}}}]},"
        " {\"role\": \"tool\", \"tool_call_id\": \"functions.get_weather:0\", \"name\": \"get_weather\", \"content\": \"ok\"}]");
    chat_conversation c;
    kimi_err err = {0};
    chat_conversation_init(&c);
    CHECK(chat_conversation_from_json(&c, in, &err) == 0);
    CHECK_INT(c.n_messages, 3);
    if (c.n_messages == 3) {
        CHECK_INT(c.messages[0].role, CHAT_ROLE_OTHER);
        CHECK_STR(chat_role_text(&c.messages[0]), "developer");
        CHECK_STR(c.messages[0].content.s, "ab");
        CHECK(c.messages[1].content.s == NULL);
        CHECK_STR(c.messages[1].reasoning.s, "why");
        CHECK_INT(c.messages[1].n_tool_calls, 1);
        /* arguments given as a value print as Python's json.dumps does (key order kept,
         * ", " and ": ", non-ASCII as is, 1.0 stays a float): the template's tojson. */
        CHECK_STR(c.messages[1].tool_calls[0].arguments.s, "{\"b\": 1.0, \"a\": [\"\xc3\xa9\", null]}");
        CHECK_STR(c.messages[1].tool_calls[0].name, "get_weather");  /* from the id */
        CHECK_INT(c.messages[2].role, CHAT_ROLE_TOOL);
        CHECK_STR(c.messages[2].tool_call_id, "functions.get_weather:0");
    }
    /* Back to JSON and in again: the same conversation. */
    json_t *out = chat_conversation_to_json(&c);
    CHECK(out != NULL);
    chat_conversation again;
    chat_conversation_init(&again);
    CHECK(chat_conversation_from_json(&again, out, &err) == 0);
    CHECK_INT(again.n_messages, c.n_messages);
    for (int i = 0; i < again.n_messages && i < c.n_messages; i++) {
        json_t *a = chat_message_to_json(&c.messages[i]), *b = chat_message_to_json(&again.messages[i]);
        CHECK_MSG(json_equal(a, b), "message %d changed in a JSON round trip", i);
        json_decref(a);
        json_decref(b);
    }
    CHECK_STR(json_string_value(json_object_get(json_array_get(out, 1), "reasoning_content")), "why");
    CHECK(json_is_null(json_object_get(json_array_get(out, 1), "content")));
    chat_conversation_free(&again);
    json_decref(out);
    chat_conversation_free(&c);
    json_decref(in);
}

static void expect_json_error(const char *messages, const char *fragment)
{
    json_t *in = parse_json(messages);
    chat_conversation c;
    kimi_err err = {0};
    chat_conversation_init(&c);
    CHECK_MSG(chat_conversation_from_json(&c, in, &err) == KIMI_ERR_INPUT, "accepted %s", messages);
    CHECK_MSG(strstr(err.msg, fragment) != NULL, "error '%s' does not name '%s'", err.msg, fragment);
    chat_conversation_free(&c);
    json_decref(in);
}

static void test_message_json_errors(void)
{
    expect_json_error("[{\"content\": \"x\"}]", "messages[0].role");
    expect_json_error("[{\"role\": \"user\"}, {\"role\": \"user\", \"content\": 5}]", "messages[1].content");
    expect_json_error("[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]", "messages[0].content[0]");
    expect_json_error("[{\"role\": \"assistant\", \"tool_calls\": {}}]", "messages[0].tool_calls");
    expect_json_error("[{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"x\", \"function\": {\"name\": \"f\"}}]}]",
                      "messages[0].tool_calls[0].function.arguments");
    expect_json_error("[{\"role\": \"user\", \"name\": 3}]", "messages[0].name");
    expect_json_error("{\"role\": \"user\"}", "messages");
}

static void test_tool_name_from_id(void)
{
    static const char *const cases[][2] = {
        {"functions.get_weather:0", "get_weather"}, {"functions.ns.read_file:12", "read_file"},
        {"get_weather:3", "get_weather"}, {"0", ""}, {" functions.now:1\n", "now"},
        {"functions.run", "run"}, {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *name = chat_tool_name_from_id(cases[i][0]);
        CHECK_STR(name, cases[i][1]);
        free(name);
    }
}

static void test_conversation_edits(void)
{
    chat_conversation c;
    kimi_err err = {0};
    chat_conversation_init(&c);
    CHECK(chat_append(&c, CHAT_ROLE_USER, "q", 1, &err) != NULL);
    chat_message *m = chat_append(&c, CHAT_ROLE_ASSISTANT, NULL, 0, &err);
    CHECK(m != NULL);
    if (m) {
        CHECK(chat_text_set(&m->reasoning, "think", 5, &err) == 0);
        CHECK(chat_add_tool_call(m, "functions.f:0", "f", "{}", 2, &err) == 0);
    }
    CHECK(chat_append_copy(&c, &c.messages[1], &err) == 0);
    CHECK_INT(c.n_messages, 3);
    CHECK_STR(c.messages[2].reasoning.s, "think");
    CHECK_INT(c.messages[2].n_tool_calls, 1);
    CHECK(c.messages[2].tool_calls[0].arguments.s != c.messages[1].tool_calls[0].arguments.s);
    chat_conversation_truncate(&c, 1);
    CHECK_INT(c.n_messages, 1);
    CHECK_STR(c.messages[0].content.s, "q");
    chat_conversation_free(&c);
}

/* A schema the TypeScript encoder rejects falls back to the template's JSON, and says why. */
static void test_tools_fallback_note(void)
{
    json_t *tools = parse_json("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                               "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": [\"string\", \"date\"]}}}}}]");
    char *text = NULL, note[256];
    kimi_err err = {0};
    CHECK(tool_declaration_render(tools, &text, note, sizeof note, &err) == 0);
    /* json.dumps(deep_sort_dict(tools), separators=(',', ':')) in python3 */
    CHECK_STR(text, "[{\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":{\"a\":{\"type\":[\"string\",\"date\"]}},\"type\":\"object\"}},\"type\":\"function\"}]");
    CHECK_MSG(strstr(note, "JSON") != NULL, "note: %s", note);
    free(text);
    json_decref(tools);
    json_t *not_list = parse_json("{\"type\": \"function\"}");
    CHECK(tool_declaration_render(not_list, &text, note, sizeof note, &err) == KIMI_ERR_INPUT);
    json_decref(not_list);
}

int main(void)
{
    model_config cfg;
    tokenizer *tok = NULL;
    kimi_err err = {0};
    if (config_load(&cfg, TINY, &err) || tokenizer_load(&tok, TINY, &cfg, &err)) {
        fprintf(stderr, "test_chat: %s\n", err.msg);
        return 1;
    }
    CHECK_INT(for_each_case(GOLDEN_CASES, tok, check_golden_case), 10);
    CHECK_INT(for_each_case(EXTRA_CASES, tok, check_extra_case), 12);
    test_message_json();
    test_message_json_errors();
    test_tool_name_from_id();
    test_conversation_edits();
    test_tools_fallback_note();
    tokenizer_free(tok);
    config_free(&cfg);
    return check_finish();
}
