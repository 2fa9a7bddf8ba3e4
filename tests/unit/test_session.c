/* test_session: the session module: JSON round trips that render to the same token ids, the
 * exact file layout, every load error with its message, atomic saves, the Markdown export and
 * the sessions folder. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/chat/session.h"
#include "engine/model/config.h"
#include "engine/base/file_io.h"
#include "engine/text/tokenizer.h"
#include "tests/unit/check.h"
#include "tests/unit/session_samples.h"

#define TINY "tests/golden/fixtures/tiny-k25"

static const tokenizer *tok;
static char tmpdir[] = "/tmp/test_session.XXXXXX";

/* ---- comparing ---- */

static int render(const session *s, int thinking, chat_rendering *r)
{
    chat_render_options opt = {.thinking = thinking, .add_generation_prompt = 1};
    kimi_err err = {0};
    *r = (chat_rendering){0};
    int rc = chat_render(tok, &s->conv, &opt, r, &err);
    CHECK_MSG(rc == 0, "render: %s", err.msg);
    return rc;
}

static int same_rendering(const session *a, const session *b, int thinking)
{
    chat_rendering ra, rb;
    if (render(a, thinking, &ra) || render(b, thinking, &rb))
        return 0;
    int same = ra.n_ids == rb.n_ids && !memcmp(ra.ids, rb.ids, ra.n_ids * sizeof *ra.ids) &&
               ra.text_len == rb.text_len && !memcmp(ra.text, rb.text, ra.text_len);
    chat_rendering_free(&ra);
    chat_rendering_free(&rb);
    return same;
}

static int text_eq(const chat_text *a, const chat_text *b)
{
    return (!a->s && !b->s) || (a->s && b->s && a->len == b->len && !memcmp(a->s, b->s, a->len));
}

static int str_eq(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

static int same_message(const chat_message *a, const chat_message *b)
{
    if (a->role != b->role || !str_eq(a->other_role, b->other_role) || !str_eq(a->name, b->name) ||
        !text_eq(&a->content, &b->content) || !text_eq(&a->reasoning, &b->reasoning) ||
        !str_eq(a->tool_call_id, b->tool_call_id) || a->n_tool_calls != b->n_tool_calls)
        return 0;
    for (int i = 0; i < a->n_tool_calls; i++)
        if (!str_eq(a->tool_calls[i].id, b->tool_calls[i].id) || !str_eq(a->tool_calls[i].name, b->tool_calls[i].name) ||
            !text_eq(&a->tool_calls[i].arguments, &b->tool_calls[i].arguments))
            return 0;
    return 1;
}

static int same_meta(const session_message_meta *a, const session_message_meta *b)
{
    return a->has_stats == b->has_stats && a->prompt_tokens == b->prompt_tokens &&
           a->reused_tokens == b->reused_tokens && a->generated_tokens == b->generated_tokens &&
           a->ttft_seconds == b->ttft_seconds && a->prefill_tok_s == b->prefill_tok_s &&
           a->decode_tok_s == b->decode_tok_s && a->reasoning_seconds == b->reasoning_seconds &&
           a->reasoning_tokens == b->reasoning_tokens && str_eq(a->stop_reason, b->stop_reason) &&
           a->n_ids == b->n_ids && (!a->n_ids || !memcmp(a->ids, b->ids, a->n_ids * sizeof *a->ids)) &&
           str_eq(a->tool_state, b->tool_state) && a->exit_status == b->exit_status &&
           a->tool_seconds == b->tool_seconds;
}

/* Text form -> session, checking success. */
static int parse_ok(session *s, const char *text, size_t len, const char *where)
{
    kimi_err err = {0};
    int rc = session_parse(s, text, len, where, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return rc;
}

static void round_trip(const session *s, session *back)
{
    char *text;
    size_t len;
    kimi_err err = {0};
    session_init(back);
    CHECK_MSG(session_to_text(s, &text, &len, &err) == 0, "%s", err.msg);
    parse_ok(back, text, len, "round-trip");
    free(text);
}

/* ---- tests ---- */

static void test_round_trip_render(void)
{
    session s, back;
    rich_session(&s);
    round_trip(&s, &back);
    CHECK_INT(back.conv.n_messages, s.conv.n_messages);
    for (int i = 0; i < s.conv.n_messages && i < back.conv.n_messages; i++) {
        CHECK_MSG(same_message(&s.conv.messages[i], &back.conv.messages[i]), "message %d differs", i);
        CHECK_MSG(same_meta(&s.meta[i], &back.meta[i]), "meta %d differs", i);
    }
    CHECK(same_rendering(&s, &back, 1));
    CHECK(same_rendering(&s, &back, 0));

    /* Text that spells a special token stays text: the structural <|im_end|> count is one per
     * message, whatever the messages say. */
    chat_rendering r;
    if (!render(&back, 1, &r)) {
        int32_t im_end = tokenizer_special_id(tok, "<|im_end|>");
        size_t n = 0;
        for (size_t i = 0; i < r.n_ids; i++)
            n += r.ids[i] == im_end;
        CHECK_INT(n, back.conv.n_messages);
        CHECK(memmem(r.text, r.text_len, "It is 11:40 UTC. <|im_end|><|im_user|> not special.", 51) != NULL);
        CHECK(memmem(r.text, r.text_len, "[\0]", 3) != NULL);  /* the NUL is rendered, not cut */
        chat_rendering_free(&r);
    }

    /* Settings and the file's own fields. */
    CHECK_STR(back.model, "Kimi-K2.5-NVFP4");
    CHECK_STR(back.backend, "cuda TP=8");
    CHECK_INT(back.created, 1796125203);
    CHECK(back.settings.temperature == 0.6f);
    CHECK(back.settings.top_p == 0.95f);
    CHECK_INT(back.settings.top_k, 40);
    CHECK_INT(back.settings.max_tokens, 4096);
    CHECK(back.settings.seed == UINT64_MAX);
    CHECK_INT(back.settings.thinking, 1);
    CHECK_INT(back.has_settings, 1);
    CHECK(back.path == NULL);
    session_free(&back);

    /* Through session_to_json / session_from_json too (what a program embedding it would use). */
    json_t *j = session_to_json(&s);
    kimi_err err = {0};
    CHECK(j != NULL);
    CHECK_MSG(session_from_json(&back, j, "json", &err) == 0, "%s", err.msg);
    CHECK(same_rendering(&s, &back, 1));
    json_decref(j);
    session_free(&back);

    /* Seeds across the range, including 0 and 2^63 (the edge of jansson's integers). */
    const uint64_t seeds[] = {0, 1, 42, (uint64_t)INT64_MAX, (uint64_t)INT64_MAX + 1, UINT64_MAX - 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        s.settings.seed = seeds[i];
        round_trip(&s, &back);
        CHECK_MSG(back.settings.seed == seeds[i], "seed %" PRIu64 " came back as %" PRIu64, seeds[i], back.settings.seed);
        session_free(&back);
    }
    session_free(&s);
}

/* Each conversation shape on its own (the history rule depends on where the last plain answer
 * is), with thinking on and off. */
static void test_round_trip_shapes(void)
{
    for (int shape = 0; shape < SAMPLE_SHAPES; shape++) {
        session s, back;
        sample_shape(&s, shape);
        round_trip(&s, &back);
        CHECK_MSG(same_rendering(&s, &back, 1), "shape %d thinking on", shape);
        CHECK_MSG(same_rendering(&s, &back, 0), "shape %d thinking off", shape);
        session_free(&s);
        session_free(&back);
    }
}

/* JSON cannot hold ill-formed UTF-8; it is written as U+FFFD, which is what the tokenizer
 * encodes such bytes as anyway, so the ids are the same. */
static void test_ill_formed_utf8(void)
{
    session s, back;
    kimi_err err = {0};
    session_init(&s);
    ADD(&s, CHAT_ROLE_USER, "bad \xC3 byte and \xE2\x82 cut");
    chat_message *t = ADD(&s, CHAT_ROLE_TOOL, "ls: \xFF\xFE.txt");
    chat_set_text(&t->tool_call_id, "functions.ls:0", &err);
    round_trip(&s, &back);
    CHECK_INT(back.conv.n_messages, 2);
    if (back.conv.n_messages == 2)
        CHECK_STR(back.conv.messages[0].content.s, "bad \xEF\xBF\xBD byte and \xEF\xBF\xBD cut");
    chat_rendering ra, rb;
    if (!render(&s, 1, &ra) && !render(&back, 1, &rb)) {
        CHECK(ra.n_ids == rb.n_ids && !memcmp(ra.ids, rb.ids, ra.n_ids * sizeof *ra.ids));
        chat_rendering_free(&ra);
        chat_rendering_free(&rb);
    }
    session_free(&s);
    session_free(&back);
}

static void test_text_layout(void)
{
    session s, back;
    rich_session(&s);
    char *text, *again;
    size_t len, len2;
    kimi_err err = {0};
    CHECK(session_to_text(&s, &text, &len, &err) == 0);
    CHECK(strlen(text) == len);  /* NUL bytes are escaped, never raw */
    const char *head = "{\n  \"meta\": {\n    \"format\": \"kimi-chat-session\",\n    \"version\": 1,\n"
                         "    \"model\": \"Kimi-K2.5-NVFP4\",\n    \"backend\": \"cuda TP=8\",\n"
                         "    \"created\": \"2026-12-01T11:40:03Z\",\n    \"settings\": {\n"
                         "      \"temperature\": 0.6,\n      \"top_p\": 0.95,\n      \"top_k\": 40,\n"
                         "      \"max_tokens\": 4096,\n      \"seed\": \"18446744073709551615\",\n"
                         "      \"thinking\": true\n    },\n    \"messages\": [\n      null,\n      null,\n      {\n"
                         "        \"stats\": {\n          \"prompt_tokens\": 120,\n";
    CHECK_MSG(!strncmp(text, head, strlen(head)), "%.600s", text);
    CHECK(strstr(text, "\"ttft_s\": 0.123456789012345,") != NULL);
    CHECK(strstr(text, "\"decode_tok_s\": 52.1234,") != NULL);
    CHECK(strstr(text, "\"prefill_tok_s\": 1234.5,") != NULL);
    CHECK(strstr(text, "\"ids\": [\n          0, 7, 163586, 2147483647, 42\n        ]") != NULL);
    CHECK(strstr(text, "\"tool\": {\n          \"state\": \"done\",\n          \"exit_status\": 1,\n          \"seconds\": 0.25\n        }") != NULL);
    CHECK(strstr(text, "\"content\": \"Thanks \\u0000!\"") != NULL);
    CHECK(strstr(text, "\"reasoning_content\": \"The user wants the time.\\u0000 I will call now.\"") != NULL);
    CHECK(strstr(text, "\"tool_calls\": [\n        {\n          \"id\": \"functions.now:0\",\n          \"type\": \"function\",\n"
                       "          \"function\": {\n            \"name\": \"now\",\n            \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"") != NULL);
    CHECK(strstr(text, "\"tool_call_id\": \"functions.now:0\"") != NULL);
    CHECK(strstr(text, "Héllo 世界 😀") != NULL);  /* UTF-8 as it is, not \u escapes */
    CHECK(text[len - 1] == '\n' && text[len - 2] == '}');
    /* jansson reads it (the layout is plain JSON) */
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_ALLOW_NUL, &je);
    CHECK_MSG(j != NULL, "%s", je.text);
    CHECK_STR(json_string_value(json_object_get(json_object_get(json_object_get(j, "meta"), "settings"), "seed")),
              "18446744073709551615");
    json_decref(j);

    /* Saving what was loaded gives the same bytes: numbers are written in their shortest exact
     * form, so a diff of two autosaves shows only what changed. */
    parse_ok(&back, text, len, "x");
    CHECK(session_to_text(&back, &again, &len2, &err) == 0);
    CHECK(len == len2 && !memcmp(text, again, len));
    free(again);
    session_free(&back);
    free(text);

    /* A long id list wraps, indented, and reads back. */
    session_message_meta *m = &s.meta[2];
    free(m->ids);
    m->n_ids = 1000;
    m->ids = malloc(1000 * sizeof *m->ids);
    for (int i = 0; i < 1000; i++)
        m->ids[i] = 160000 + i;
    CHECK(session_to_text(&s, &text, &len, &err) == 0);
    size_t longest = 0, run = 0;
    for (size_t i = 0; i < len; i++) {
        run = text[i] == '\n' ? 0 : run + 1;
        if (run > longest && !memchr(text + i - run + 1, '"', run))
            longest = run;
    }
    CHECK_MSG(longest <= 100, "a line of numbers is %zu bytes", longest);
    parse_ok(&back, text, len, "x");
    CHECK(back.conv.n_messages == s.conv.n_messages && same_meta(&s.meta[2], &back.meta[2]));
    session_free(&back);
    free(text);

    /* Unknown stats: a non-finite rate and a negative count (a server that reports no
       reasoning tokens) are written as 0, what they read back as. */
    m->decode_tok_s = 1.0 / 0.0;
    m->reasoning_tokens = -1;
    CHECK(session_to_text(&s, &text, &len, &err) == 0);
    CHECK(strstr(text, "\"decode_tok_s\": 0.0") != NULL && strstr(text, "\"reasoning_tokens\": 0") != NULL);
    parse_ok(&back, text, len, "x");
    CHECK(back.conv.n_messages == s.conv.n_messages && back.meta[2].decode_tok_s == 0);
    session_free(&back);
    free(text);
    session_free(&s);

    /* created 0: the time of writing. */
    session_init(&s);
    time_t before = time(NULL);
    CHECK(session_to_text(&s, &text, &len, &err) == 0);
    parse_ok(&back, text, len, "x");
    CHECK(back.created >= before && back.created <= time(NULL));
    CHECK(back.conv.n_messages == 0 && back.has_settings);
    CHECK(back.settings.temperature == 1.0f && back.settings.top_p == 0.95f && back.settings.thinking == 1);
    session_free(&back);
    free(text);
}

static void test_other_forms(void)
{
    session s;
    const char *openai = "{\"model\": \"x\", \"messages\": [{\"role\": \"system\", \"content\": \"sys\"},"
                         " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]},"
                         " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"functions.f:0\", \"type\": \"function\","
                         " \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]},"
                         " {\"role\": \"tool\", \"tool_call_id\": \"functions.f:0\", \"content\": \"ok\"}]}";
    if (!parse_ok(&s, openai, strlen(openai), "openai.json")) {
        CHECK_INT(s.conv.n_messages, 4);
        CHECK_STR(s.conv.messages[1].content.s, "ab");
        CHECK_STR(s.conv.messages[2].tool_calls[0].arguments.s, "{\"k\": 1}");
        CHECK_INT(s.has_settings, 0);
        CHECK(s.settings.temperature == 1.0f && s.settings.top_p == 0.95f && s.settings.thinking == 1);
        CHECK(s.model == NULL && s.created == 0);
        for (int i = 0; i < 4; i++)
            CHECK(!s.meta[i].has_stats && !s.meta[i].n_ids && !s.meta[i].tool_state);
        session_free(&s);
    }
    const char *bare = "[{\"role\": \"user\", \"content\": \"hi\\u0000there\"}, {\"role\": \"assistant\", \"content\": \"yo\", \"reasoning_content\": \"r\"}]";
    if (!parse_ok(&s, bare, strlen(bare), "bare.json")) {
        CHECK_INT(s.conv.n_messages, 2);
        CHECK_INT(s.conv.messages[0].content.len, 8);
        CHECK(!memcmp(s.conv.messages[0].content.s, "hi\0there", 8));
        CHECK_STR(s.conv.messages[1].reasoning.s, "r");
        session_free(&s);
    }
    const char *meta_null = "{\"meta\": null, \"messages\": []}";
    if (!parse_ok(&s, meta_null, strlen(meta_null), "m.json")) {
        CHECK_INT(s.conv.n_messages, 0);
        session_free(&s);
    }
    /* partial meta: what is there is used, the rest keeps its default */
    const char *partial = "{\"meta\": {\"settings\": {\"seed\": 7, \"thinking\": false}, \"messages\": [{\"ids\": [1, 2]}]},"
                          " \"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}";
    if (!parse_ok(&s, partial, strlen(partial), "p.json")) {
        CHECK(s.settings.seed == 7 && s.settings.thinking == 0 && s.settings.temperature == 1.0f);
        CHECK(s.meta[0].n_ids == 2 && s.meta[0].ids[1] == 2 && !s.meta[0].has_stats);
        session_free(&s);
    }
}

/* The error for text (which must fail) equals want exactly; *s is left empty. */
static void expect_error(const char *text, int code, const char *want)
{
    session s;
    kimi_err err = {0};
    memset(&s, 0x5a, sizeof s);  /* an output: whatever was there is overwritten */
    int rc = session_parse(&s, text, strlen(text), "chat.json", &err);
    CHECK_MSG(rc == code, "%s: rc %d, want %d (%s)", text, rc, code, err.msg);
    CHECK_MSG(err.code == code, "%s", text);
    CHECK_MSG(!strcmp(err.msg, want), "%s\n  got:  %s\n  want: %s", text, err.msg, want);
    CHECK(!strchr(err.msg, '\n'));
    CHECK(s.conv.n_messages == 0 && s.conv.messages == NULL && s.meta == NULL && s.model == NULL &&
          s.backend == NULL && s.path == NULL && s.cap_meta == 0);
    session_free(&s);
}

/* The error starts with prefix (jansson's own wording follows). */
static void expect_error_prefix(const char *text, size_t len, const char *prefix)
{
    session s;
    kimi_err err = {0};
    if (len == SIZE_MAX)
        len = strlen(text);
    int rc = session_parse(&s, text, len, "chat.json", &err);
    CHECK_MSG(rc == KIMI_ERR_INPUT, "%.*s: rc %d", (int)len, text, rc);
    CHECK_MSG(!strncmp(err.msg, prefix, strlen(prefix)), "got: %s, want prefix: %s", err.msg, prefix);
    CHECK(s.conv.n_messages == 0 && s.meta == NULL);
    session_free(&s);
}

#define MSG1 "{\"role\": \"user\", \"content\": \"hi\"}"
#define META(x) "{\"meta\": " x ", \"messages\": [" MSG1 "]}"

/* Stats out of range (kimi-chat wrote reasoning_tokens -1 for --server chats before issue 18)
 * read as unknown, 0: they never make a conversation unreadable. */
static void test_unknown_stats_load(void)
{
    const char *text = "{\"meta\": {\"messages\": [null, {\"stats\": {\"reasoning_tokens\": -1, "
                       "\"generated_tokens\": -1, \"decode_tok_s\": -3.5}}]}, \"messages\": "
                       "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}";
    session s;
    parse_ok(&s, text, strlen(text), "old.json");
    CHECK(s.conv.n_messages == 2 && s.meta[1].has_stats && s.meta[1].reasoning_tokens == 0 &&
          s.meta[1].generated_tokens == 0 && s.meta[1].decode_tok_s == 0);
    session_free(&s);
}

static void test_errors(void)
{
    const int IN = KIMI_ERR_INPUT;
    expect_error("", IN, "chat.json: empty file");
    expect_error(" \n", IN, "chat.json: empty file");
    expect_error_prefix("{\n  \"messages\": [\n    {\"role\": \"user\",, }\n", SIZE_MAX, "chat.json:3:21: invalid JSON: ");
    expect_error_prefix("[] trailing", SIZE_MAX, "chat.json:1:");
    expect_error_prefix("\"just a string\"", SIZE_MAX, "chat.json:1:");
    expect_error("{\"meta\": {\"format\": \"kimi-chat-session\", \"version\": 7, \"settings\": 5}, \"messages\": 3}", IN,
                 "chat.json: session format version 7 is newer than this kimi-chat reads (1)");
    expect_error(META("{\"version\": 0}"), IN, "chat.json: meta.version: not a positive integer");
    expect_error(META("{\"version\": \"1\"}"), IN, "chat.json: meta.version: not a positive integer");
    expect_error(META("{\"format\": \"other\"}"), IN, "chat.json: meta.format: not \"kimi-chat-session\"");
    expect_error(META("[]"), IN, "chat.json: meta: not an object");
    expect_error(META("{\"messages\": [null, null]}"), IN, "chat.json: meta.messages: 2 entries for 1 messages");
    expect_error(META("{\"messages\": []}"), IN, "chat.json: meta.messages: 0 entries for 1 messages");
    expect_error(META("{\"messages\": {}}"), IN, "chat.json: meta.messages: not a list");
    expect_error(META("{\"messages\": [5]}"), IN, "chat.json: meta.messages[0]: not an object or null");
    expect_error(META("{\"messages\": [{\"stats\": []}]}"), IN, "chat.json: meta.messages[0].stats: not an object");
    expect_error(META("{\"messages\": [{\"stats\": {\"prompt_tokens\": \"12\"}}]}"), IN,
                 "chat.json: meta.messages[0].stats.prompt_tokens: not an integer");
    expect_error(META("{\"messages\": [{\"stats\": {\"reused_tokens\": 4294967296}}]}"), IN,
                 "chat.json: meta.messages[0].stats.reused_tokens: 4294967296 is out of range");
    expect_error(META("{\"messages\": [{\"stats\": {\"ttft_s\": \"fast\"}}]}"), IN,
                 "chat.json: meta.messages[0].stats.ttft_s: not a number");
    expect_error(META("{\"messages\": [{\"stats\": {\"stop_reason\": 1}}]}"), IN,
                 "chat.json: meta.messages[0].stats.stop_reason: not a string");
    expect_error(META("{\"messages\": [{\"ids\": {}}]}"), IN, "chat.json: meta.messages[0].ids: not a list");
    expect_error(META("{\"messages\": [{\"ids\": [1, 2, -3]}]}"), IN, "chat.json: meta.messages[0].ids[2]: not a token id");
    expect_error(META("{\"messages\": [{\"ids\": [2147483648]}]}"), IN, "chat.json: meta.messages[0].ids[0]: not a token id");
    expect_error(META("{\"messages\": [{\"ids\": [1.5]}]}"), IN, "chat.json: meta.messages[0].ids[0]: not a token id");
    expect_error(META("{\"messages\": [{\"tool\": {\"exit_status\": 0}}]}"), IN,
                 "chat.json: meta.messages[0].tool.state: missing or not a string");
    expect_error(META("{\"messages\": [{\"tool\": {\"state\": \"done\", \"seconds\": null, \"exit_status\": 1.0}}]}"), IN,
                 "chat.json: meta.messages[0].tool.exit_status: not an integer");
    expect_error(META("{\"settings\": []}"), IN, "chat.json: meta.settings: not an object");
    expect_error(META("{\"settings\": {\"seed\": \"12a\"}}"), IN,
                 "chat.json: meta.settings.seed: not a decimal number from 0 to 18446744073709551615");
    expect_error(META("{\"settings\": {\"seed\": \"18446744073709551616\"}}"), IN,
                 "chat.json: meta.settings.seed: not a decimal number from 0 to 18446744073709551615");
    expect_error(META("{\"settings\": {\"seed\": -1}}"), IN,
                 "chat.json: meta.settings.seed: not a decimal number from 0 to 18446744073709551615");
    expect_error(META("{\"settings\": {\"seed\": \"\"}}"), IN,
                 "chat.json: meta.settings.seed: not a decimal number from 0 to 18446744073709551615");
    expect_error(META("{\"settings\": {\"top_p\": 1.5}}"), IN, "chat.json: meta.settings.top_p: out of range");
    expect_error(META("{\"settings\": {\"temperature\": 1e300}}"), IN, "chat.json: meta.settings.temperature: out of range");
    expect_error(META("{\"settings\": {\"temperature\": true}}"), IN, "chat.json: meta.settings.temperature: not a number");
    expect_error(META("{\"settings\": {\"top_k\": -1}}"), IN, "chat.json: meta.settings.top_k: -1 is out of range");
    expect_error(META("{\"settings\": {\"thinking\": 1}}"), IN, "chat.json: meta.settings.thinking: not true or false");
    expect_error(META("{\"model\": 5}"), IN, "chat.json: meta.model: not a string");
    expect_error(META("{\"backend\": []}"), IN, "chat.json: meta.backend: not a string");
    expect_error(META("{\"created\": \"yesterday\"}"), IN,
                 "chat.json: meta.created: not a UTC time like 2026-12-01T11:40:03Z");
    expect_error(META("{\"created\": \"2026-02-30T10:00:00Z\"}"), IN,
                 "chat.json: meta.created: not a UTC time like 2026-12-01T11:40:03Z");
    expect_error(META("{\"created\": \"2026-12-01T11:40:03+02:00\"}"), IN,
                 "chat.json: meta.created: not a UTC time like 2026-12-01T11:40:03Z");
    expect_error("{\"meta\": {}}", IN, "chat.json: messages: missing");
    expect_error("{\"messages\": {\"role\": \"user\"}}", IN, "chat.json: messages: not a list");
    expect_error("{\"messages\": [" MSG1 ", " MSG1 ", " MSG1 ", {\"role\": \"assistant\", \"tool_calls\": "
                 "[{\"id\": \"functions.f:0\", \"type\": \"function\", \"function\": {\"name\": \"f\"}}]}]}",
                 IN, "chat.json: messages[3].tool_calls[0].function.arguments: missing");
    expect_error("{\"messages\": [" MSG1 ", {\"content\": \"x\"}]}", IN, "chat.json: messages[1].role: missing or not a string");
    expect_error("{\"messages\": [" MSG1 ", {\"role\": \"user\", \"content\": 5}]}", IN,
                 "chat.json: messages[1].content: not a string");
    expect_error("[" MSG1 ", 7]", IN, "chat.json: [1]: not an object");
    expect_error("[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]", IN,
                 "chat.json: [0].content[0]: image_url parts are not supported (text only)");

    /* A truncated file fails wherever it is cut: never a partial load. */
    session s;
    char *text;
    size_t len;
    kimi_err err = {0};
    rich_session(&s);
    CHECK(session_to_text(&s, &text, &len, &err) == 0);
    int cuts = 0, failed = 0;
    for (size_t cut = 0; cut + 2 < len; cut += 1 + cut / 50, cuts++) {
        session t;
        kimi_err e = {0};
        int rc = session_parse(&t, text, cut, "cut.json", &e);
        failed += rc == KIMI_ERR_INPUT && !strncmp(e.msg, "cut.json:", 9) && t.conv.n_messages == 0 && t.meta == NULL;
        session_free(&t);
    }
    CHECK_INT(failed, cuts);
    CHECK(cuts > 100);
    free(text);
    session_free(&s);
}

/* ---- files ---- */

static char *path_in(const char *name)
{
    char *p = malloc(strlen(tmpdir) + strlen(name) + 2);
    sprintf(p, "%s/%s", tmpdir, name);
    return p;
}

static int count_temp_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] == '.' && strstr(e->d_name, ".tmp") != NULL;
    if (d)
        closedir(d);
    return n;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A save removes the temp files no writer holds, and only those (issue 18): a live writer in
 * another PID namespace has a pid that does not run here, and a writer killed long ago may
 * have a pid that runs here again. Its lock, not its pid, tells. */
static void test_temps_of_other_writers(void)
{
    session s;
    kimi_err err = {0};
    char *path = path_in("t.json");
    char *live = path_in(".t.json.999999999-0.tmp"), *dead = path_in(".t.json.1-0.tmp");
    int live_fd = open(live, O_WRONLY | O_CREAT | O_EXCL, 0600);
    int dead_fd = open(dead, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(live_fd >= 0 && dead_fd >= 0 && flock(live_fd, LOCK_EX) == 0);
    close(dead_fd);
    rich_session(&s);
    CHECK_MSG(session_save(&s, path, &err) == 0, "%s", err.msg);
    CHECK_MSG(access(live, F_OK) == 0, "a live writer's temp file was removed");
    CHECK_MSG(access(dead, F_OK) != 0, "a dead writer's temp file was kept (its pid runs here)");
    close(live_fd);     /* the writer dies */
    CHECK(session_save(&s, path, &err) == 0);
    CHECK(access(live, F_OK) != 0);
    CHECK_INT(count_temp_files(tmpdir), 0);

    /* the session lock: one holder; the next one learns its pid; a released lock is free and
       leaves no lock file */
    session_lock a, b;
    long holder = -1;
    CHECK(session_lock_take(&a, path, &holder, &err) == 0);
    CHECK(session_lock_take(&b, path, &holder, &err) == KIMI_ERR_STATE && holder == (long)getpid());
    session_lock_release(&a);
    CHECK(session_lock_take(&b, path, &holder, &err) == 0);
    session_lock_release(&b);
    session_lock_release(&b);   /* twice is nothing */
    char *lock = path_in(".t.json.lock");
    CHECK(access(lock, F_OK) != 0);
    free(lock);
    unlink(path);
    session_free(&s);
    free(path);
    free(live);
    free(dead);
}

/* session_delete (the /sessions picker's d): a session another process continues (its lock
 * held) is not deleted; a free one is, and only it: its neighbour and a link's target stay, and
 * no lock file is left. */
static void test_delete(void)
{
    session s;
    kimi_err err = {0};
    char *path = path_in("del.json"), *other = path_in("keep.json"), *link = path_in("link.json");
    char *lock = path_in(".del.json.lock");
    rich_session(&s);
    CHECK(session_save(&s, path, &err) == 0 && session_save(&s, other, &err) == 0);
    CHECK(symlink(other, link) == 0);
    session_lock held;
    long holder;
    CHECK(session_lock_take(&held, path, &holder, &err) == 0);
    err = (kimi_err){0};
    CHECK_INT(session_delete(path, &err), KIMI_ERR_STATE);
    CHECK_MSG(strstr(err.msg, "open in another kimi-chat") && strstr(err.msg, "not deleted"), "%s", err.msg);
    CHECK_MSG(access(path, F_OK) == 0, "a session whose lock is held was deleted");
    session_lock_release(&held);
    CHECK_MSG(session_delete(path, &err) == 0, "%s", err.msg);
    CHECK(access(path, F_OK) != 0 && access(lock, F_OK) != 0 && access(other, F_OK) == 0);
    CHECK_MSG(session_delete(link, &err) == 0, "%s", err.msg);
    CHECK_MSG(access(link, F_OK) != 0 && access(other, F_OK) == 0, "deleting a link removed its target");
    err = (kimi_err){0};
    CHECK(session_delete(path, &err) != 0 && strstr(err.msg, "del.json: cannot delete"));
    unlink(other);
    session_free(&s);
    free(path);
    free(other);
    free(link);
    free(lock);
}

static void test_save_load(void)
{
    session s, back;
    kimi_err err = {0};
    char *path = path_in("chat.json");
    rich_session(&s);
    CHECK_MSG(session_save(&s, path, &err) == 0, "%s", err.msg);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK_INT(count_temp_files(tmpdir), 0);
    CHECK_MSG(session_load(&back, path, &err) == 0, "%s", err.msg);
    CHECK_STR(back.path, path);
    CHECK(same_rendering(&s, &back, 1));
    CHECK_INT(back.conv.n_messages, s.conv.n_messages);
    for (int i = 0; i < s.conv.n_messages && i < back.conv.n_messages; i++)
        CHECK(same_message(&s.conv.messages[i], &back.conv.messages[i]) && same_meta(&s.meta[i], &back.meta[i]));
    /* the file is exactly session_to_text */
    char *text, *disk;
    size_t len, dlen;
    CHECK(session_to_text(&s, &text, &len, &err) == 0);
    CHECK(file_read_all(path, &disk, &dlen, &err) == 0);
    CHECK(len == dlen && !memcmp(text, disk, len));
    free(text);
    free(disk);
    session_free(&back);

    /* Overwriting replaces it whole. */
    session_truncate(&s, 2);
    CHECK_INT(s.conv.n_messages, 2);
    CHECK(s.meta[2].stop_reason == NULL && s.meta[2].ids == NULL);  /* dropped meta is freed and zeroed */
    CHECK(session_save(&s, path, &err) == 0);
    CHECK(session_load(&back, path, &err) == 0);
    CHECK_INT(back.conv.n_messages, 2);
    session_free(&back);

    /* The folder must exist; the message names the file and the folder. */
    char *nodir = path_in("missing/chat.json");
    CHECK(session_save(&s, nodir, &err) == KIMI_ERR_IO);
    char want[600];
    snprintf(want, sizeof want, "%s: cannot save: the folder %s/missing does not exist", nodir, tmpdir);
    CHECK_STR(err.msg, want);
    free(nodir);
    /* A folder that exists but takes no new files is not called missing. */
    CHECK(session_save(&s, "/proc/chat.json", &err) == KIMI_ERR_IO);
    CHECK_MSG(strstr(err.msg, "/proc/chat.json: cannot save: cannot create /proc/.chat.json.") == err.msg,
              "%s", err.msg);

    /* A failed rename (the target is a folder) removes the temp file and leaves the target. */
    char *isdir = path_in("folder.json");
    mkdir(isdir, 0700);
    CHECK(session_save(&s, isdir, &err) == KIMI_ERR_IO);
    CHECK_MSG(strstr(err.msg, "folder.json: cannot save: ") != NULL, "%s", err.msg);
    CHECK_INT(count_temp_files(tmpdir), 0);
    CHECK(stat(isdir, &st) == 0 && S_ISDIR(st.st_mode));
    rmdir(isdir);
    free(isdir);

    /* A failed save leaves the old file as it was (a read-only folder refuses the temp file). */
    if (geteuid() != 0) {
        char *ro = path_in("ro"), *ro_file = path_in("ro/chat.json");
        mkdir(ro, 0700);
        CHECK(session_save(&s, ro_file, &err) == 0);
        char *before;
        size_t blen;
        CHECK(file_read_all(ro_file, &before, &blen, &err) == 0);
        chmod(ro, 0500);
        rich_session(&back);
        CHECK(session_save(&back, ro_file, &err) == KIMI_ERR_IO);
        CHECK_MSG(strstr(err.msg, "Permission denied") != NULL, "%s", err.msg);
        session_free(&back);
        char *after;
        size_t alen;
        CHECK(file_read_all(ro_file, &after, &alen, &err) == 0);
        CHECK(blen == alen && !memcmp(before, after, blen));
        free(before);
        free(after);
        chmod(ro, 0700);
        unlink(ro_file);
        rmdir(ro);
        free(ro);
        free(ro_file);
    }

    /* Temp files of writers that died mid-save are removed by the next save; a live one's (it
       holds its lock) stay. */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    char dead[64], live[64];
    snprintf(dead, sizeof dead, ".chat.json.%ld-3.tmp", (long)child);
    snprintf(live, sizeof live, ".chat.json.%ld-0.tmp", (long)getppid());
    char *dead_path = path_in(dead), *live_path = path_in(live), *other = path_in(".other.json.1-0.tmp");
    write_file(dead_path, "{\"messages\": [");
    write_file(live_path, "{");
    write_file(other, "{");
    int live_fd = open(live_path, O_RDONLY);
    CHECK(live_fd >= 0 && flock(live_fd, LOCK_EX) == 0);
    CHECK(session_save(&s, path, &err) == 0);
    CHECK(access(dead_path, F_OK) != 0);
    CHECK(access(live_path, F_OK) == 0);
    CHECK(access(other, F_OK) == 0);  /* another file's temp is not this save's business */
    close(live_fd);
    unlink(live_path);
    unlink(other);
    free(dead_path);
    free(live_path);
    free(other);

    /* Loading: a missing file, a corrupt one, a newer one: one line naming the file, path NULL. */
    char *missing = path_in("nope.json");
    CHECK(session_load(&back, missing, &err) == KIMI_ERR_IO);
    CHECK(strstr(err.msg, missing) == err.msg && strstr(err.msg, "No such file") != NULL);
    CHECK(back.path == NULL && back.conv.n_messages == 0);
    free(missing);
    char *corrupt = path_in("corrupt.json");
    write_file(corrupt, "{\"meta\": {\"format\": \"kimi-chat-session\", \"version\": 1},\n \"messages\": [{\"role\": \"us");
    CHECK(session_load(&back, corrupt, &err) == KIMI_ERR_INPUT);
    snprintf(want, sizeof want, "%s:2:", corrupt);
    CHECK_MSG(!strncmp(err.msg, want, strlen(want)), "%s", err.msg);
    CHECK(!strchr(err.msg, '\n') && back.path == NULL && back.conv.n_messages == 0);
    write_file(corrupt, "{\"meta\": {\"version\": 7}, \"messages\": []}");
    CHECK(session_load(&back, corrupt, &err) == KIMI_ERR_INPUT);
    snprintf(want, sizeof want, "%s: session format version 7 is newer than this kimi-chat reads (1)", corrupt);
    CHECK_STR(err.msg, want);
    unlink(corrupt);
    free(corrupt);
    unlink(path);
    free(path);
    session_free(&s);
}

/* ---- Markdown ---- */

static const char *after(const char *what, const char *from)
{
    const char *p = from ? strstr(from, what) : NULL;
    CHECK_MSG(p != NULL, "missing (in order): %s", what);
    return p ? p + strlen(what) : NULL;
}

/* Every fence opened is closed by a fence of its own length, and nothing inside closes it. */
static int fences_balanced(const char *md)
{
    size_t open = 0;
    for (const char *line = md; *line;) {
        const char *end = strchr(line, '\n');
        size_t n = strspn(line, "`");
        if (open == 0 && n >= 3)
            open = n;
        else if (open && n >= open) {
            if (n != open || line + n != (end ? end : line + strlen(line)))
                return 0;  /* a longer run or text after it: not the close we opened */
            open = 0;
        }
        if (!end)
            break;
        line = end + 1;
    }
    return open == 0;
}

static void test_markdown(void)
{
    session s;
    rich_session(&s);
    char *md;
    size_t len;
    kimi_err err = {0};
    CHECK(session_to_markdown(&s, &md, &len, &err) == 0);
    CHECK(strlen(md) == len);  /* no raw NUL */
    const char *p = md;
    p = after("# kimi-chat session\n\n- Model: Kimi-K2.5-NVFP4\n- Backend: cuda TP=8\n"
              "- Date: 2026-12-01 11:40:03 UTC\n"
              "- Settings: temperature 0.6 · top_p 0.95 · top_k 40 · max tokens 4096 · seed 18446744073709551615 · thinking on\n\n",
              p);
    CHECK(p == md + strlen("# kimi-chat session\n\n- Model: Kimi-K2.5-NVFP4\n- Backend: cuda TP=8\n"
                           "- Date: 2026-12-01 11:40:03 UTC\n"
                           "- Settings: temperature 0.6 · top_p 0.95 · top_k 40 · max tokens 4096 · seed 18446744073709551615 · thinking on\n\n"));
    p = after("### System\n\nYou are Kimi. Answer in <|im_end|> plain text.\n\n", p);
    p = after("### You\n\nHéllo 世界 😀, what time is it?\nSecond line with a NUL: [␀] and `code`.\n\n", p);
    p = after("### Kimi\n\n<details><summary>Thinking · 412 tokens · 6.1 s</summary>\n\n"
              "The user wants the time.␀ I will call now.\n\n</details>\n\n", p);
    p = after("Tool call `functions.now:0`:\n\n```json\n{\"tz\": \"UTC\"}\n```\n\n", p);
    p = after("Tool call `functions.word_count:1`:\n\n````json\n{\"text\": \"a ``` b\\u0000\"}\n````\n\n", p);
    p = after("*38 tokens · 52.1 tok/s · tool calls*\n\n", p);
    p = after("<details><summary>Result of functions.now:0 · done · 0.3 s</summary>\n\n"
              "```\nTue Dec  1 11:40:03 UTC 2026\n```\n\n</details>\n\n", p);
    p = after("<details><summary>Result of functions.word_count:1 · done · exit status 1 · 0.2 s</summary>\n\n"
              "`````\n```\nfenced <|im_end|> output\n````\n␀tail\n`````\n\n</details>\n\n", p);
    p = after("<details><summary>Thinking · 412 tokens · 6.1 s</summary>\n\nNow answer: 中文 reasoning.\n\n</details>\n\n"
              "It is 11:40 UTC. <|im_end|><|im_user|> not special.\n\n*38 tokens · 52.1 tok/s · end of turn*\n\n", p);
    p = after("### You\n\nThanks ␀!\n", p);
    CHECK(p && *p == 0);
    /* the TP once, in the backend line ("- Backend: cuda TP=8" and "- TP: 8" before) */
    int tps = 0;
    for (const char *q = md; (q = strstr(q, "TP")); q++)
        tps++;
    CHECK_INT(tps, 1);
    /* "### Kimi" once for the whole tool-using turn */
    int kimi = 0;
    for (const char *q = md; (q = strstr(q, "### Kimi")); q++)
        kimi++;
    CHECK_INT(kimi, 1);
    CHECK(fences_balanced(md));
    free(md);

    /* HTML and backticks in ids; a session without model, stats or created. */
    session_free(&s);
    session_init(&s);
    s.created = 1796125203;
    chat_message *a = ADD(&s, CHAT_ROLE_ASSISTANT, NULL);
    chat_add_tool_call(a, "`odd`<id>", "f", "```", 3, &err);
    chat_message *t = ADD(&s, CHAT_ROLE_TOOL, "x");
    chat_set_text(&t->tool_call_id, "<b>&", &err);
    CHECK(session_to_markdown(&s, &md, &len, &err) == 0);
    p = after("- Model: unknown\n- Backend: unknown\n- Date: 2026-12-01 11:40:03 UTC\n"
              "- Settings: temperature 1 · top_p 0.95 · seed 0 · thinking on\n\n### Kimi\n\n", md);
    p = after("Tool call `` `odd`&lt;id&gt; ``:\n\n````json\n```\n````\n\n", p);
    p = after("<details><summary>Result of &lt;b&gt;&amp;</summary>\n\n```\nx\n```\n\n</details>\n", p);
    CHECK(!strstr(md, "tok/s") && !strstr(md, "- TP:"));
    CHECK(fences_balanced(md));
    free(md);

    /* Written atomically, mode 0600, the same text. */
    char *path = path_in("chat.md");
    CHECK(session_export_markdown(&s, path, &err) == 0);
    char *disk;
    size_t dlen;
    CHECK(session_to_markdown(&s, &md, &len, &err) == 0);
    CHECK(file_read_all(path, &disk, &dlen, &err) == 0);
    CHECK(dlen == len && !memcmp(md, disk, len));
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK_INT(count_temp_files(tmpdir), 0);
    free(md);
    free(disk);
    unlink(path);
    free(path);
    session_free(&s);
}

/* ---- the sessions folder ---- */

static void set_mtime(const char *path, time_t t)
{
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

static void test_list_and_new_path(void)
{
    kimi_err err = {0};
    char *dir = path_in("sessions");
    session_entry *list;
    int n = -1;
    CHECK(session_list(dir, &list, &n, &err) == 0 && n == 0 && list == NULL);  /* missing: empty */
    mkdir(dir, 0700);

    session s;
    session_init(&s);
    ADD(&s, CHAT_ROLE_SYSTEM, "sys");
    ADD(&s, CHAT_ROLE_USER, "\n  Première question: une très longue ligne qui dépasse soiéxante octets, oui\nline 2");
    ADD(&s, CHAT_ROLE_ASSISTANT, "ok");
    char *older = session_new_path(dir, "", 1796125203);
    char want[600];
    snprintf(want, sizeof want, "%s/2026-12-01T11-40-03.json", dir);
    CHECK_STR(older, want);
    CHECK(session_save(&s, older, &err) == 0);
    char *second = session_new_path(dir, "", 1796125203);
    snprintf(want, sizeof want, "%s/2026-12-01T11-40-03-2.json", dir);
    CHECK_STR(second, want);
    write_file(second, "");
    char *third = session_new_path(dir, "", 1796125203);
    snprintf(want, sizeof want, "%s/2026-12-01T11-40-03-3.json", dir);
    CHECK_STR(third, want);
    unlink(second);
    /* a one-shot run's file says so in its name (every -p run looked like a chat in /sessions) */
    char *one_shot = session_new_path(dir, "prompt-", 1796125203);
    snprintf(want, sizeof want, "%s/prompt-2026-12-01T11-40-03.json", dir);
    CHECK_STR(one_shot, want);
    unlink(one_shot);
    free(one_shot);
    /* two writers asking for a name in the same second (before either saved) get two names */
    char *race_dir = path_in("race");
    mkdir(race_dir, 0700);
    char *first_writer = session_new_path(race_dir, "", 1796125203), *second_writer = session_new_path(race_dir, "", 1796125203);
    CHECK_MSG(first_writer && second_writer && strcmp(first_writer, second_writer), "%s %s", first_writer, second_writer);
    unlink(first_writer);
    unlink(second_writer);
    rmdir(race_dir);
    free(first_writer);
    free(second_writer);
    free(race_dir);
    char slash_dir[600];
    snprintf(slash_dir, sizeof slash_dir, "%s/", dir);
    char *with_slash = session_new_path(slash_dir, "", 1796125203 + 60);
    snprintf(want, sizeof want, "%s/2026-12-01T11-41-03.json", dir);
    CHECK_STR(with_slash, want);

    session_truncate(&s, 0);
    ADD(&s, CHAT_ROLE_USER, "newest");
    CHECK(session_save(&s, with_slash, &err) == 0);
    session_truncate(&s, 0);
    CHECK(session_save(&s, third, &err) == 0);  /* no user message: empty title */
    char *bad = path_in("sessions/bad.json"), *txt = path_in("sessions/notes.txt");
    char *hidden = path_in("sessions/.hidden.json"), *sub = path_in("sessions/sub.json");
    write_file(bad, "{\"messages\": [");
    write_file(txt, "[]");
    write_file(hidden, "[]");
    mkdir(sub, 0700);
    set_mtime(older, 1796125203);
    set_mtime(bad, 1796125203 + 10);
    set_mtime(third, 1796125203 + 20);
    set_mtime(with_slash, 1796125203 + 30);

    CHECK_MSG(session_list(dir, &list, &n, &err) == 0, "%s", err.msg);
    CHECK_INT(n, 4);
    if (n == 4) {
        CHECK_STR(list[0].path, with_slash);
        CHECK_STR(list[0].title, "newest");
        CHECK_INT(list[0].n_messages, 1);
        CHECK_INT(list[0].modified, 1796125203 + 30);
        CHECK_STR(list[1].path, third);
        CHECK_STR(list[1].title, "");
        CHECK_INT(list[1].n_messages, 0);
        CHECK_STR(list[2].path, bad);
        CHECK_INT(list[2].unreadable, 1);
        CHECK_MSG(!strncmp(list[2].title, "(unreadable: 1:14: invalid JSON: ", 33), "%s", list[2].title);
        CHECK_STR(list[3].path, older);
        CHECK_INT(list[3].n_messages, 3);
        CHECK_INT(list[3].unreadable, 0);
        /* 60 bytes would cut "é" in two: the title stops before it */
        CHECK_STR(list[3].title, "Première question: une très longue ligne qui dépasse soi");
        CHECK(strlen(list[3].title) <= 60);
    }
    session_list_free(list, n);

    /* same mtime: the later name first */
    set_mtime(with_slash, 1796125203);
    CHECK(session_list(dir, &list, &n, &err) == 0 && n == 4);
    if (n == 4) {
        CHECK_STR(list[0].path, third);
        CHECK_STR(list[1].path, bad);
        CHECK_STR(list[2].path, with_slash);
        CHECK_STR(list[3].path, older);
    }

    /* the names alone (Tab completion): the same files, in name order, none opened */
    char **names = NULL;
    int n_names = -1;
    CHECK_MSG(session_list_names(dir, &names, &n_names, &err) == 0, "%s", err.msg);
    CHECK_INT(n_names, n);
    for (int i = 0; i < n_names && i < n; i++) {
        if (i)
            CHECK_MSG(strcmp(names[i - 1], names[i]) < 0, "%s %s", names[i - 1], names[i]);
        int found = 0;
        for (int j = 0; j < n; j++) {
            const char *base = strrchr(list[j].path, '/') + 1;
            found |= strlen(base) == strlen(names[i]) + 5 && !strncmp(base, names[i], strlen(names[i]));
        }
        CHECK_MSG(found, "%s", names[i]);
    }
    session_names_free(names, n_names);
    session_list_free(list, n);
    char *gone = path_in("nowhere");
    CHECK(session_list_names(gone, &names, &n_names, &err) == 0 && n_names == 0 && !names);
    free(gone);

    unlink(older);
    unlink(third);
    unlink(with_slash);
    unlink(bad);
    unlink(txt);
    unlink(hidden);
    rmdir(sub);
    rmdir(dir);
    free(older);
    free(second);
    free(third);
    free(with_slash);
    free(bad);
    free(txt);
    free(hidden);
    free(sub);
    free(dir);
    session_free(&s);
}

static void test_append_truncate(void)
{
    session s;
    kimi_err err = {0};
    session_init(&s);
    session_message_meta meta = {0};
    set_stats(&meta, 3, 10, "end of turn");
    chat_message m = {.role = CHAT_ROLE_ASSISTANT};
    for (int i = 0; i < 40; i++)
        CHECK(session_append(&s, &m, i % 2 ? &meta : NULL, &err) == 0);
    CHECK_INT(s.conv.n_messages, 40);
    CHECK(s.cap_meta >= 40);
    CHECK(s.meta[1].ids != meta.ids && s.meta[1].stop_reason != meta.stop_reason);  /* deep copies */
    CHECK(same_meta(&s.meta[39], &meta) && !s.meta[38].has_stats);
    session_truncate(&s, 5);
    CHECK_INT(s.conv.n_messages, 5);
    CHECK(!s.meta[5].has_stats && !s.meta[39].ids);
    session_truncate(&s, -3);
    CHECK_INT(s.conv.n_messages, 0);
    session_meta_free(&meta);
    CHECK(meta.ids == NULL && meta.stop_reason == NULL);
    session_free(&s);
    CHECK(s.conv.n_messages == 0 && s.meta == NULL && s.settings.top_p == 0.95f);
}

/* test_session [--locale NAME]: with a locale whose decimal point is a comma (as a curses
 * program gets from the environment), every check must pass just the same. */
int main(int argc, char **argv)
{
    model_config cfg;
    tokenizer *t = NULL;
    kimi_err err = {0};
    if (argc == 3 && !strcmp(argv[1], "--locale")) {
        if (!setlocale(LC_NUMERIC, argv[2])) {
            fprintf(stderr, "test_session: no locale %s\n", argv[2]);
            return 1;
        }
        CHECK_STR(localeconv()->decimal_point, ",");
    }
    if (config_load(&cfg, TINY, &err) || tokenizer_load(&t, TINY, &cfg, &err)) {
        fprintf(stderr, "test_session: %s\n", err.msg);
        return 1;
    }
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    tok = t;
    test_append_truncate();
    test_round_trip_render();
    test_round_trip_shapes();
    test_ill_formed_utf8();
    test_text_layout();
    test_other_forms();
    test_errors();
    test_unknown_stats_load();
    test_save_load();
    test_temps_of_other_writers();
    test_delete();
    test_markdown();
    test_list_and_new_path();
    CHECK_MSG(rmdir(tmpdir) == 0, "%s not empty: %s", tmpdir, strerror(errno));
    tokenizer_free(t);
    config_free(&cfg);
    return check_finish();
}
