/* test_openai_request: endpoint URLs from what users type (normalised, credentials only in the
 * request URLs, errors that never repeat them), the dialect by host, and the request body of
 * each dialect: fields, omissions, exact floats, reasoning_content on tool-call messages. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "app/chat/openai_request.h"
#include "tests/unit/check.h"

static void test_urls(void)
{
    struct {
        const char *url, *chat, *models, *origin, *base, *host;
    } ok[] = {
        {"http://127.0.0.1:8000", "http://127.0.0.1:8000/v1/chat/completions",
         "http://127.0.0.1:8000/v1/models", "http://127.0.0.1:8000", "http://127.0.0.1:8000/v1",
         "127.0.0.1"},
        {"http://localhost:8000/v1/", "http://localhost:8000/v1/chat/completions",
         "http://localhost:8000/v1/models", "http://localhost:8000", "http://localhost:8000/v1",
         "localhost"},
        {"HTTP://LocalHost:30000/v1/chat/completions", "http://LocalHost:30000/v1/chat/completions",
         "http://LocalHost:30000/v1/models", "http://localhost:30000", "http://localhost:30000/v1",
         "localhost"},
        {"https://api.moonshot.ai/v1", "https://api.moonshot.ai/v1/chat/completions",
         "https://api.moonshot.ai/v1/models", "https://api.moonshot.ai", "https://api.moonshot.ai/v1",
         "api.moonshot.ai"},
        {"https://user:s3cret@gw.example/proxy//", "https://user:s3cret@gw.example/proxy/v1/chat/completions",
         "https://user:s3cret@gw.example/proxy/v1/models", "https://gw.example",
         "https://gw.example/proxy/v1", "gw.example"},
        {"http://[::1]:8000/v1/models", "http://[::1]:8000/v1/chat/completions",
         "http://[::1]:8000/v1/models", "http://[::1]:8000", "http://[::1]:8000/v1", "[::1]"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        openai_endpoints e;
        kimi_err err = {0};
        CHECK_MSG(openai_endpoints_parse(&e, ok[i].url, &err) == 0, "%s: %s", ok[i].url, err.msg);
        CHECK_STR(e.chat_url, ok[i].chat);
        CHECK_STR(e.models_url, ok[i].models);
        CHECK_STR(e.origin, ok[i].origin);
        CHECK_STR(e.base, ok[i].base);
        CHECK_STR(e.host, ok[i].host);
        openai_endpoints_free(&e);
    }
    const char *bad[] = {"", "ftp://h", "127.0.0.1:8000", "http://", "http://:80",
                         "http://h:99999", "http://h:8x", "http://u:s3cret@h/v1?key=s3cret",
                         "http://h/#frag", "http://h /v1", "http://[::1/v1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        openai_endpoints e;
        kimi_err err = {0};
        CHECK_MSG(openai_endpoints_parse(&e, bad[i], &err) == KIMI_ERR_USAGE, "%s accepted", bad[i]);
        CHECK(strstr(err.msg, "s3cret") == NULL && strncmp(err.msg, "server URL: ", 12) == 0);
    }
}

static void test_dialects(void)
{
    CHECK_INT(openai_dialect_resolve(OPENAI_DIALECT_AUTO, "api.moonshot.ai"), OPENAI_DIALECT_MOONSHOT);
    CHECK_INT(openai_dialect_resolve(OPENAI_DIALECT_AUTO, "api.moonshot.cn"), OPENAI_DIALECT_MOONSHOT);
    CHECK_INT(openai_dialect_resolve(OPENAI_DIALECT_AUTO, "api.kimi.com"), OPENAI_DIALECT_MOONSHOT);
    CHECK_INT(openai_dialect_resolve(OPENAI_DIALECT_AUTO, "evilmoonshot.ai"), OPENAI_DIALECT_SERVER);
    CHECK_INT(openai_dialect_resolve(OPENAI_DIALECT_AUTO, "127.0.0.1"), OPENAI_DIALECT_SERVER);
    CHECK_INT(openai_dialect_resolve(OPENAI_DIALECT_BOTH, "api.moonshot.ai"), OPENAI_DIALECT_BOTH);
}

/* system, user, assistant (reasoning + a call), tool, assistant (a call, no reasoning), tool. */
static void build_conversation(chat_conversation *c)
{
    kimi_err err;
    chat_conversation_init(c);
    chat_append(c, CHAT_ROLE_SYSTEM, "Be terse.", 9, &err);
    chat_append(c, CHAT_ROLE_USER, "Weather in Paris?", 17, &err);
    chat_message *a = chat_append(c, CHAT_ROLE_ASSISTANT, NULL, 0, &err);
    chat_text_set(&a->reasoning, "Need the tool.", 14, &err);
    chat_add_tool_call(a, "functions.get_weather:0", "get_weather", "{\"city\": \"Paris\"}", 17, &err);
    chat_message *t = chat_append(c, CHAT_ROLE_TOOL, "18 C", 4, &err);
    chat_set_text(&t->tool_call_id, "functions.get_weather:0", &err);
    a = chat_append(c, CHAT_ROLE_ASSISTANT, NULL, 0, &err);
    chat_add_tool_call(a, "functions.get_time:1", "get_time", "{}", 2, &err);
    t = chat_append(c, CHAT_ROLE_TOOL, "12:00", 5, &err);
    chat_set_text(&t->tool_call_id, "functions.get_time:1", &err);
}

static json_t *body_of(const generator_request *req, openai_dialect d, char **text)
{
    kimi_err err;
    *text = openai_request_body(req, "kimi-k2.5", d, &err);
    CHECK(*text != NULL);
    json_error_t jerr;
    json_t *j = *text ? json_loads(*text, 0, &jerr) : NULL;
    CHECK(json_is_object(j));
    return j;
}

static void test_body(void)
{
    chat_conversation c;
    build_conversation(&c);
    json_error_t jerr;
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                               "\"parameters\":{\"type\":\"object\",\"properties\":{\"t\":"
                               "{\"type\":\"number\",\"minimum\":0.123456789}}}}}]", 0, &jerr);
    generator_request req = {.conv = &c, .tools = tools, .thinking = 1, .temperature = 0.6f,
                             .top_p = 0.95f, .top_k = 0, .max_tokens = 0,
                             .seed = 0xFFFFFFFFFFFFFFFFull};
    char *text;
    json_t *j = body_of(&req, OPENAI_DIALECT_SERVER, &text);
    CHECK_STR(json_string_value(json_object_get(j, "model")), "kimi-k2.5");
    CHECK(json_is_true(json_object_get(j, "stream")));
    CHECK(json_is_true(json_object_get(json_object_get(j, "stream_options"), "include_usage")));
    CHECK_STR(json_string_value(json_object_get(j, "tool_choice")), "auto");
    CHECK(json_equal(json_object_get(j, "tools"), tools));
    CHECK(strstr(text, "\"temperature\":0.6,") != NULL);   /* not 0.60000002384 */
    CHECK(strstr(text, "\"top_p\":0.95,") != NULL);
    CHECK(strstr(text, "0.123456789") != NULL);
    CHECK(json_real_value(json_object_get(j, "temperature")) == 0.6);
    CHECK(json_object_get(j, "top_k") == NULL && json_object_get(j, "max_tokens") == NULL);
    CHECK(json_integer_value(json_object_get(j, "seed")) == INT64_MAX);
    CHECK(json_is_true(json_object_get(json_object_get(j, "chat_template_kwargs"), "thinking")));
    CHECK(json_object_get(j, "thinking") == NULL);
    json_t *messages = json_object_get(j, "messages");
    CHECK_INT(json_array_size(messages), 6);
    json_t *a = json_array_get(messages, 2), *a2 = json_array_get(messages, 4);
    CHECK_STR(json_string_value(json_object_get(a, "reasoning_content")), "Need the tool.");
    CHECK(json_is_null(json_object_get(a, "content")));
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(a, "tool_calls"), 0), "id")),
              "functions.get_weather:0");
    CHECK_STR(json_string_value(json_object_get(a2, "reasoning_content")), "");
    CHECK_STR(json_string_value(json_object_get(json_array_get(messages, 3), "tool_call_id")),
              "functions.get_weather:0");
    json_decref(j);
    free(text);

    /* Moonshot: its thinking switch, no sampling fields; max_tokens and top_k when set */
    req.thinking = 0;
    req.max_tokens = 512;
    req.top_k = 20;
    req.tools = NULL;
    j = body_of(&req, OPENAI_DIALECT_MOONSHOT, &text);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "thinking"), "type")), "disabled");
    CHECK(!json_object_get(j, "temperature") && !json_object_get(j, "top_p") &&
          !json_object_get(j, "top_k") && !json_object_get(j, "seed") &&
          !json_object_get(j, "chat_template_kwargs") && !json_object_get(j, "tools") &&
          !json_object_get(j, "tool_choice"));
    CHECK_INT(json_integer_value(json_object_get(j, "max_tokens")), 512);
    /* thinking off: a tool-call message without reasoning gets none */
    CHECK(json_object_get(json_array_get(json_object_get(j, "messages"), 4), "reasoning_content") == NULL);
    json_decref(j);
    free(text);

    req.thinking = 1;
    j = body_of(&req, OPENAI_DIALECT_BOTH, &text);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "thinking"), "type")), "enabled");
    CHECK(json_is_true(json_object_get(json_object_get(j, "chat_template_kwargs"), "thinking")));
    CHECK_INT(json_integer_value(json_object_get(j, "top_k")), 20);
    json_decref(j);
    free(text);

    /* an empty tools array sends no tools */
    json_t *none = json_array();
    req.tools = none;
    j = body_of(&req, OPENAI_DIALECT_SERVER, &text);
    CHECK(!json_object_get(j, "tools") && !json_object_get(j, "tool_choice"));
    json_decref(j);
    free(text);
    json_decref(none);
    json_decref(tools);
    chat_conversation_free(&c);
}

int main(void)
{
    test_urls();
    test_dialects();
    test_body();
    return check_finish();
}
