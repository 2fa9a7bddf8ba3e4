/* test_generator_remote: the remote generator against tests/remote/server.py on 127.0.0.1 (an
 * ephemeral port; the server exits when this test's end of its stdin closes), driven as the app
 * drives it: start, poll on event_fd, pump. Recorded vLLM, SGLang and Moonshot streams, whole
 * and byte by byte; a tool round trip (the second request's messages); the API key only in the
 * Authorization header; HTTP errors in one line with the key redacted; cancel within 100 ms of
 * a stalled stream (measured at the server); early closes; retries; the idle timeout. */
#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "app/chat/generator_remote.h"
#include "engine/base/file_io.h"
#include "tests/unit/check.h"
#include "tests/unit/event_log.h"

static const char test_key[] = "test-key-5f3a9c";   /* error_401.json echoes it */
static pid_t server_pid;
static int server_stdin = -1;
static int port;
static char url[64];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int server_start(void)
{
    int in[2], out[2];
    if (pipe(in) || pipe(out))
        return -1;
    server_pid = fork();
    if (server_pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execlp("python3", "python3", "tests/remote/server.py", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    server_stdin = in[1];
    char line[64] = "";
    size_t n = 0;
    struct pollfd p = {out[0], POLLIN, 0};
    double deadline = now_s() + 20;
    while (n < sizeof line - 1 && !memchr(line, '\n', n) && now_s() < deadline) {
        if (poll(&p, 1, 200) > 0) {
            ssize_t got = read(out[0], line + n, sizeof line - 1 - n);
            if (got <= 0)
                break;
            n += (size_t)got;
            line[n] = 0;
        }
    }
    close(out[0]);
    if (sscanf(line, "PORT %d", &port) != 1)
        return -1;
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    return 0;
}

static void server_stop(void)
{
    if (server_stdin >= 0)
        close(server_stdin);
    for (int i = 0; i < 100; i++) {
        if (waitpid(server_pid, NULL, WNOHANG) == server_pid)
            return;
        usleep(20000);
    }
    kill(server_pid, SIGKILL);
    waitpid(server_pid, NULL, 0);
}

/* ---- talking to the server's control endpoints ---- */

static size_t collect(char *ptr, size_t size, size_t n, void *user)
{
    strbuf_add(user, ptr, size * n);
    return size * n;
}

static char *control(const char *path, const char *post)
{
    char full[128];
    snprintf(full, sizeof full, "%s%s", url, path);
    CURL *c = curl_easy_init();
    strbuf b = {0};
    curl_easy_setopt(c, CURLOPT_URL, full);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    if (post)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
    CHECK(curl_easy_perform(c) == CURLE_OK);
    curl_easy_cleanup(c);
    return strbuf_take(&b);
}

static void next_reply(const char *json)
{
    free(control("/__next", json));
}

/* The n-th chat request the server saw (negative: from the end), as an object (owned). */
static json_t *logged_request(int n)
{
    char *text = control("/__log", NULL);
    json_error_t jerr;
    json_t *log = json_loads(text ? text : "", 0, &jerr);
    free(text);
    size_t size = json_array_size(log);
    json_t *entry = json_array_get(log, n < 0 ? size + (size_t)n : (size_t)n);
    json_incref(entry);
    json_decref(log);
    return entry;
}

static size_t logged_count(void)
{
    char *text = control("/__log", NULL);
    json_error_t jerr;
    json_t *log = json_loads(text ? text : "", 0, &jerr);
    size_t n = json_array_size(log);
    json_decref(log);
    free(text);
    return n;
}

/* ---- driving the generator ---- */

typedef struct {
    event_log log;
    int waiting;                /* WAITING progress events */
    double first_content;       /* when the first content event came */
    double cancel_delay;        /* > 0: cancel this long after the first content */
    double cancel_after_start;  /* > 0: cancel this long after start */
    double cancelled_at, done_at;
    /* the assistant message as the events describe it */
    strbuf reasoning, content;
    char ids[4][64], names[4][64];
    strbuf args[4];
    int calls;
} turn;

static void on_event(void *user, const generator_event *ev)
{
    turn *t = user;
    if (ev->kind == GENERATOR_EVENT_PROGRESS) {
        t->waiting += ev->progress.kind == GENERATOR_PROGRESS_WAITING;
        return;
    }
    const parse_event *p = &ev->parse;
    event_log_add(&t->log, p);
    if (p->kind == PARSE_CONTENT_TEXT && !t->first_content)
        t->first_content = now_s();
    if (p->kind == PARSE_REASONING_TEXT)
        strbuf_add(&t->reasoning, p->text, p->len);
    if (p->kind == PARSE_CONTENT_TEXT)
        strbuf_add(&t->content, p->text, p->len);
    if (p->kind == PARSE_TOOL_CALL_BEGIN && p->call < 4)
        t->calls = p->call + 1;
    if (p->kind == PARSE_TOOL_CALL_ID && p->call < 4) {
        snprintf(t->ids[p->call], sizeof t->ids[0], "%s", p->text);
        snprintf(t->names[p->call], sizeof t->names[0], "%s", p->name);
    }
    if (p->kind == PARSE_TOOL_CALL_ARGS && p->call < 4)
        strbuf_add(&t->args[p->call], p->text, p->len);
}

static void turn_free(turn *t)
{
    event_log_reset(&t->log);
    free(t->reasoning.data);
    free(t->content.data);
    for (int i = 0; i < 4; i++)
        free(t->args[i].data);
    *t = (turn){0};
}

/* Run one answer to its end (or 15 s); 0 when it ended. */
static int run_turn(generator *g, const generator_request *req, turn *t)
{
    kimi_err err = {0};
    int rc = g->ops->start(g, req, &err);
    CHECK_MSG(rc == 0, "start: %s", err.msg);
    if (rc)
        return -1;
    double start = now_s(), deadline = start + 15;
    while (now_s() < deadline) {
        struct pollfd p = {g->ops->event_fd(g), POLLIN, 0};
        poll(&p, 1, 5);
        double now = now_s();
        if (!t->cancelled_at && ((t->cancel_delay > 0 && t->first_content &&
                                  now >= t->first_content + t->cancel_delay) ||
                                 (t->cancel_after_start > 0 && now >= start + t->cancel_after_start))) {
            t->cancelled_at = now_s();
            g->ops->cancel(g);
        }
        if (!(p.revents & POLLIN) && !t->cancelled_at)
            continue;
        rc = g->ops->pump(g, on_event, t, &err);
        CHECK_MSG(rc >= 0, "pump: %s", err.msg);
        if (rc != 0) {
            t->done_at = now_s();
            return rc == 1 ? 0 : -1;
        }
    }
    CHECK_MSG(0, "the answer did not end within 15 s");
    return -1;
}

static generator *open_gen(const char *model, openai_dialect dialect, long idle_s)
{
    remote_options o;
    remote_options_init(&o);
    o.url = url;
    o.model = model;
    o.api_key_env = "KIMI_TEST_KEY";
    o.dialect = dialect;
    o.retry_delay_ms = 20;
    o.idle_timeout_s = idle_s;
    generator *g = NULL;
    kimi_err err = {0};
    CHECK_MSG(generator_remote_open(&g, &o, &err) == 0, "open: %s", err.msg);
    return g;
}

static chat_conversation conv;
static generator_request request;

static void one_user_message(const char *text)
{
    kimi_err err;
    chat_conversation_free(&conv);
    chat_conversation_init(&conv);
    chat_append(&conv, CHAT_ROLE_USER, text, strlen(text), &err);
    request = (generator_request){.conv = &conv, .thinking = 1, .temperature = 1.0f,
                                  .top_p = 0.95f, .seed = 42};
}

/* ---- the tests ---- */

static void test_open(void)
{
    generator *g = open_gen(NULL, OPENAI_DIALECT_AUTO, 120);
    if (!g)
        return;
    printf("summary: %s\n", g->summary);
    CHECK_STR(g->model, "kimi-k2.5-test");
    CHECK_INT(g->context_limit, 262144);
    char backend[96];
    snprintf(backend, sizeof backend, "server %s", url);
    CHECK_STR(g->backend, backend);
    CHECK(strstr(g->summary, "the first model the server lists") != NULL);
    CHECK(strstr(g->summary, "API key from $KIMI_TEST_KEY") != NULL);
    CHECK(strstr(g->summary, test_key) == NULL);
    g->ops->close(g);

    /* credentials in the URL stay out of every field; a model named without a context */
    remote_options o;
    remote_options_init(&o);
    char with_user[128];
    snprintf(with_user, sizeof with_user, "http://someone:pw123@127.0.0.1:%d/v1/", port);
    o.url = with_user;
    o.model = "other-model";
    kimi_err err = {0};
    CHECK(generator_remote_open(&g, &o, &err) == 0);
    if (g) {
        CHECK_STR(g->model, "other-model");
        CHECK_STR(g->backend, backend);
        CHECK(!strstr(g->summary, "pw123") && !strstr(g->summary, "someone"));
        CHECK(strstr(g->summary, "context unknown") != NULL);
        CHECK_INT(g->context_limit, 0);
        g->ops->close(g);
    }
    o.model = "not-served";
    CHECK(generator_remote_open(&g, &o, &err) == 0);
    if (g) {
        printf("summary: %s\n", g->summary);
        CHECK(strstr(g->summary, "not in the server's /models list") != NULL);
        g->ops->close(g);
    }
    /* a variable named but unset; a key file */
    o.api_key_env = "KIMI_TEST_UNSET_VARIABLE";
    CHECK(generator_remote_open(&g, &o, &err) == KIMI_ERR_USAGE);
    CHECK(strstr(err.msg, "$KIMI_TEST_UNSET_VARIABLE is not set") != NULL);
    char key_path[] = "/tmp/kimi-test-key-XXXXXX";
    int fd = mkstemp(key_path);
    CHECK(fd >= 0 && write(fd, "  file-key-77\n", 14) == 14);
    close(fd);
    o.api_key_file = key_path;
    o.model = "kimi-k2.5-test";
    CHECK(generator_remote_open(&g, &o, &err) == 0);
    if (g) {
        CHECK(strstr(g->summary, "API key from the file") != NULL);
        one_user_message("hi");
        next_reply("{\"fixture\":\"vllm_plain.sse\",\"mode\":\"whole\"}");
        turn t = {0};
        run_turn(g, &request, &t);
        json_t *req = logged_request(-1);
        CHECK_STR(json_string_value(json_object_get(json_object_get(req, "headers"), "Authorization")),
                  "Bearer file-key-77");
        json_decref(req);
        turn_free(&t);
        g->ops->close(g);
    }
    unlink(key_path);
    /* nobody listening: the open fails after its tries, quickly */
    remote_options_init(&o);
    o.url = "http://127.0.0.1:9";
    o.retries = 2;
    o.retry_delay_ms = 10;
    double t0 = now_s();
    CHECK(generator_remote_open(&g, &o, &err) == KIMI_ERR_IO);
    CHECK_MSG(strstr(err.msg, "cannot connect") && strstr(err.msg, "(3 tries)"), "%s", err.msg);
    CHECK(strncmp(err.msg, "server http://127.0.0.1:9: ", 27) == 0);
    CHECK(now_s() - t0 < 5);
    printf("open error: %s\n", err.msg);
    o.url = "ftp://127.0.0.1";
    CHECK(generator_remote_open(&g, &o, &err) == KIMI_ERR_USAGE);
}

typedef struct {
    const char *fixture, *mode;
    openai_dialect dialect;
    const char *events;
    int prompt, generated, reused;
    const char *error;      /* a part of result.error, or "" for none */
} replay;

static void test_replays(void)
{
    static const replay cases[] = {
        {"vllm_plain.sse", "whole", OPENAI_DIALECT_SERVER,
         "C|Hello\nC|! 你好\nC|，世界 \nC|🌍\nC| done.\nS|end_of_turn\n", 21, 7, 0, ""},
        {"vllm_plain.sse", "bytewise", OPENAI_DIALECT_SERVER,
         "C|Hello\nC|! 你好\nC|，世界 \nC|🌍\nC| done.\nS|end_of_turn\n", 21, 7, 0, ""},
        {"vllm_reasoning.sse", "whole", OPENAI_DIALECT_SERVER,
         "R|The user\nR| greets me\nR| in Chinese\nR|; answer \nR|briefly.\nC|你好！\nC|How can I\n"
         "C| help?\nS|end_of_turn\n", 40, 12, 32, ""},
        {"sglang_reasoning.sse", "bytewise", OPENAI_DIALECT_SERVER,
         "R|Short\nR| thought.\nC|Short\nC| answer.\nS|end_of_turn\n", 9, 4, 0, ""},
        {"moonshot_reasoning.sse", "whole", OPENAI_DIALECT_MOONSHOT,
         "R|用户在\nR|打招呼\nR|。\nC|你好\nC|！有什么\nC|可以帮你？\nS|end_of_turn\n", 19, 13, 16, ""},
        {"moonshot_tool_call.sse", "bytewise", OPENAI_DIALECT_MOONSHOT,
         "R|I need the weather.\nB|0\nI|0|functions.get_weather:0|get_weather\nA|0|{\"city\":\n"
         "A|0|\"Berlin\"}\nE|0|valid\nS|end_of_turn\n", 120, 20, 0, ""},
        {"vllm_length_thinking.sse", "whole", OPENAI_DIALECT_SERVER,
         "R|Let me think\nR| about this\nR| very carefully\nS|max_tokens_while_thinking\n", 12, 3, 0,
         ""},
        {"vllm_error_midstream.sse", "whole", OPENAI_DIALECT_SERVER,
         "C|Partial\nC| answer\nS|error\n", 0, 2, 0,
         ": the stream ended with an error: EngineCore encountered an issue."},
        {"framing_crlf.sse", "bytewise", OPENAI_DIALECT_SERVER,
         "C|multi-line \nC|no space after the colon\nS|end_of_turn\n", 5, 2, 0, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const replay *c = &cases[i];
        generator *g = open_gen("kimi-k2.5-test", c->dialect, 120);
        if (!g)
            continue;
        char next[160];
        snprintf(next, sizeof next, "{\"fixture\":\"%s\",\"mode\":\"%s\"}", c->fixture, c->mode);
        next_reply(next);
        one_user_message("Hello");
        turn t = {0};
        CHECK(run_turn(g, &request, &t) == 0);
        CHECK_MSG(!strcmp(event_log_text(&t.log), c->events), "%s %s:\n%s", c->fixture, c->mode,
                  event_log_text(&t.log));
        CHECK_MSG(t.log.bad == 0 && t.log.stops == 1, "%s: malformed events", c->fixture);
        const generator_result *r = g->ops->result(g);
        CHECK_MSG(r->prompt_tokens == c->prompt && r->generated_tokens == c->generated &&
                  r->reused_tokens == c->reused, "%s: tokens %d %d %d", c->fixture,
                  r->prompt_tokens, r->generated_tokens, r->reused_tokens);
        CHECK_MSG(c->error[0] ? strstr(r->error, c->error) != NULL : !r->error[0], "%s: error \"%s\"",
                  c->fixture, r->error);
        CHECK(r->ids == NULL && r->ttft_seconds > 0 && r->decode_tok_s >= 0);
        if (!strcmp(c->mode, "bytewise"))
            CHECK_MSG(r->decode_tok_s > 0, "%s: decode %.1f tok/s", c->fixture, r->decode_tok_s);
        /* after the end, pump says so again and delivers nothing */
        kimi_err err;
        turn after = {0};
        CHECK(g->ops->pump(g, on_event, &after, &err) == 1 && after.log.text.len == 0);
        /* what the request carried for this dialect */
        json_t *logged = logged_request(-1);
        json_error_t jerr;
        json_t *body = json_loads(json_string_value(json_object_get(logged, "body")), 0, &jerr);
        if (c->dialect == OPENAI_DIALECT_MOONSHOT)
            CHECK(json_object_get(body, "thinking") && !json_object_get(body, "temperature"));
        else
            CHECK(json_object_get(body, "chat_template_kwargs") && json_object_get(body, "temperature"));
        json_decref(body);
        json_decref(logged);
        turn_free(&t);
        g->ops->close(g);
    }
}

static void test_tool_round_trip(void)
{
    generator *g = open_gen(NULL, OPENAI_DIALECT_AUTO, 120);
    if (!g)
        return;
    json_error_t jerr;
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                               "\"description\":\"Weather\",\"parameters\":{\"type\":\"object\","
                               "\"properties\":{\"city\":{\"type\":\"string\"}}}}}]", 0, &jerr);
    one_user_message("Weather in Paris and Tokyo?");
    request.tools = tools;
    next_reply("{\"fixture\":\"vllm_tool_calls.sse\",\"mode\":\"bytewise\"}");
    turn t = {0};
    CHECK(run_turn(g, &request, &t) == 0);
    CHECK_INT(t.calls, 2);
    CHECK_STR(t.ids[0], "functions.get_weather:0");
    CHECK_STR(t.ids[1], "functions.get_weather:1");
    CHECK_STR(t.args[1].data, "{\"city\": \"東京\"}");
    CHECK_INT(g->ops->result(g)->generated_tokens, 32);
    json_t *first = logged_request(-1);
    const char *first_body = json_string_value(json_object_get(first, "body"));
    json_t *headers = json_object_get(first, "headers");
    CHECK_STR(json_string_value(json_object_get(headers, "Authorization")), "Bearer test-key-5f3a9c");
    CHECK_STR(json_string_value(json_object_get(headers, "Accept")), "text/event-stream");
    CHECK_STR(json_string_value(json_object_get(headers, "Content-Type")), "application/json");
    CHECK(first_body && !strstr(first_body, test_key));
    json_t *body = json_loads(first_body ? first_body : "", 0, &jerr);
    CHECK(json_equal(json_object_get(body, "tools"), tools));
    CHECK_STR(json_string_value(json_object_get(body, "tool_choice")), "auto");
    CHECK(json_is_true(json_object_get(body, "stream")));
    CHECK(json_is_true(json_object_get(json_object_get(body, "stream_options"), "include_usage")));
    CHECK_STR(json_string_value(json_object_get(body, "model")), "kimi-k2.5-test");
    json_decref(body);
    json_decref(first);

    /* the assistant message as the app keeps it from the events, then the tool results */
    kimi_err err;
    chat_message *a = chat_append(&conv, CHAT_ROLE_ASSISTANT, NULL, 0, &err);
    chat_text_set(&a->reasoning, t.reasoning.data, t.reasoning.len, &err);
    for (int i = 0; i < t.calls; i++)
        chat_add_tool_call(a, t.ids[i], t.names[i], t.args[i].data, t.args[i].len, &err);
    const char *results[2] = {"{\"temp_c\": 18}", "{\"temp_c\": 22}"};
    for (int i = 0; i < t.calls; i++) {
        chat_message *m = chat_append(&conv, CHAT_ROLE_TOOL, results[i], strlen(results[i]), &err);
        chat_set_text(&m->tool_call_id, t.ids[i], &err);
    }
    turn_free(&t);
    next_reply("{\"fixture\":\"vllm_tool_answer.sse\",\"mode\":\"whole\"}");
    CHECK(run_turn(g, &request, &t) == 0);
    CHECK_STR(t.content.data, "Paris: 18 °C, Tokyo: 22 °C.");
    CHECK_INT(g->ops->result(g)->reused_tokens, 256);
    json_t *second = logged_request(-1);
    body = json_loads(json_string_value(json_object_get(second, "body")), 0, &jerr);
    json_t *messages = json_object_get(body, "messages");
    CHECK_INT(json_array_size(messages), 4);
    json_t *am = json_array_get(messages, 1);
    CHECK_STR(json_string_value(json_object_get(am, "role")), "assistant");
    CHECK_STR(json_string_value(json_object_get(am, "reasoning_content")),
              "Two cities: call the tool twice.");
    json_t *calls = json_object_get(am, "tool_calls");
    CHECK_INT(json_array_size(calls), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *call = json_array_get(calls, i), *tm = json_array_get(messages, 2 + i);
        CHECK_STR(json_string_value(json_object_get(call, "id")), i ? "functions.get_weather:1"
                                                                    : "functions.get_weather:0");
        CHECK_STR(json_string_value(json_object_get(call, "type")), "function");
        CHECK_STR(json_string_value(json_object_get(json_object_get(call, "function"), "name")),
                  "get_weather");
        CHECK_STR(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
                  i ? "{\"city\": \"東京\"}" : "{\"city\": \"Paris\", \"unit\": \"c\"}");
        CHECK_STR(json_string_value(json_object_get(tm, "role")), "tool");
        CHECK_STR(json_string_value(json_object_get(tm, "tool_call_id")),
                  i ? "functions.get_weather:1" : "functions.get_weather:0");
        CHECK_STR(json_string_value(json_object_get(tm, "content")), results[i]);
    }
    json_decref(body);
    json_decref(second);
    turn_free(&t);
    json_decref(tools);
    request.tools = NULL;
    g->ops->close(g);
}

static void test_http_errors(void)
{
    static const struct {
        int status;
        const char *fixture, *expected;
    } cases[] = {
        {401, "error_401.json",
         ": 401 Unauthorized: Incorrect API key provided: [redacted]. You can find your API key at "
         "the console.; check the API key in $KIMI_TEST_KEY (named by --api-key-env)"},
        {429, "error_429.json",
         ": 429 rate limited: Your account reached its TPM rate limit, please retry after 1 seconds"},
        {500, "error_500.json",
         ": 500 server error: The engine is dead: CUDA error: an illegal memory access was encountered"},
        {400, "error_400_detail.json", ": 400 Bad Request: Field required"},
        {503, "", ": 503 server error"},
    };
    generator *g = open_gen("kimi-k2.5-test", OPENAI_DIALECT_SERVER, 120);
    if (!g)
        return;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char next[160];
        if (cases[i].fixture[0])
            snprintf(next, sizeof next, "{\"fixture\":\"%s\",\"mode\":\"status\",\"status\":%d}",
                     cases[i].fixture, cases[i].status);
        else
            snprintf(next, sizeof next, "{\"mode\":\"status\",\"status\":%d}", cases[i].status);
        next_reply(next);
        one_user_message("hi");
        turn t = {0};
        CHECK(run_turn(g, &request, &t) == 0);
        const char *e = g->ops->result(g)->error;
        char expected[400];
        snprintf(expected, sizeof expected, "server %s%s", url, cases[i].expected);
        CHECK_STR(e, expected);
        CHECK(!strstr(e, test_key) && !strchr(e, '\n'));
        CHECK_STR(event_log_text(&t.log), "S|error\n");
        turn_free(&t);
    }
    /* 200 but JSON, not an event stream */
    next_reply("{\"fixture\":\"error_500.json\",\"mode\":\"json200\"}");
    turn t = {0};
    CHECK(run_turn(g, &request, &t) == 0);
    CHECK_MSG(strstr(g->ops->result(g)->error,
                     ": the reply is not an event stream (Content-Type: application/json): The engine is dead") != NULL,
              "%s", g->ops->result(g)->error);
    turn_free(&t);
    g->ops->close(g);
}

/* The offset just past the n-th "data:" event of a fixture (so a cut keeps n events). */
static long after_events(const char *fixture, int n)
{
    char path[128], *text;
    size_t len;
    kimi_err err;
    snprintf(path, sizeof path, "tests/remote/%s", fixture);
    if (file_read_all(path, &text, &len, &err))
        return 0;
    const char *at = text;
    for (int i = 0; i < n && at; i++) {
        at = strstr(at, "data:");
        at = at ? strstr(at, "\n\n") : NULL;
        at = at ? at + 2 : NULL;
    }
    long off = at ? (long)(at - text) : 0;
    free(text);
    return off;
}

static void test_cancel_and_early_ends(void)
{
    generator *g = open_gen("kimi-k2.5-test", OPENAI_DIALECT_SERVER, 120);
    if (!g)
        return;
    /* a stream that stalls after two content chunks: cancel 300 ms into the stall */
    long cut = after_events("vllm_plain.sse", 3);
    char next[200];
    snprintf(next, sizeof next, "{\"fixture\":\"vllm_plain.sse\",\"mode\":\"stall\",\"stall_after\":%ld}", cut);
    next_reply(next);
    one_user_message("hi");
    turn t = {.cancel_delay = 0.3};
    CHECK(run_turn(g, &request, &t) == 0);
    CHECK_STR(event_log_text(&t.log), "C|Hello\nC|! 你好\nS|cancelled\n");
    CHECK_STR(g->ops->result(g)->error, "");
    double ui_ms = (t.done_at - t.cancelled_at) * 1000;
    /* the server notices the closed connection; its clock is CLOCK_MONOTONIC too */
    double server_ms = -1;
    for (int i = 0; i < 100 && server_ms < 0; i++) {
        json_t *entry = logged_request(-1);
        json_t *closed = json_object_get(entry, "closed_at");
        if (json_is_number(closed))
            server_ms = (json_number_value(closed) - t.cancelled_at) * 1000;
        json_decref(entry);
        if (server_ms < 0)
            usleep(10000);
    }
    printf("cancel: the answer ended %.1f ms after cancel; the server saw the connection close "
           "after %.1f ms\n", ui_ms, server_ms);
    CHECK_MSG(ui_ms < 100, "the answer ended %.1f ms after cancel", ui_ms);
    CHECK_MSG(server_ms >= 0 && server_ms < 100, "the server saw the close after %.1f ms", server_ms);
    turn_free(&t);

    /* cancel before any byte: the server holds the headers back */
    next_reply("{\"fixture\":\"vllm_plain.sse\",\"mode\":\"whole\",\"delay\":3}");
    t = (turn){.cancel_after_start = 0.3};
    CHECK(run_turn(g, &request, &t) == 0);
    CHECK_STR(event_log_text(&t.log), "S|cancelled\n");
    CHECK_MSG(t.waiting >= 1, "no WAITING progress while the server was silent");
    CHECK((t.done_at - t.cancelled_at) * 1000 < 100);
    turn_free(&t);

    /* WAITING progress while a server thinks before its first byte, then the answer */
    next_reply("{\"fixture\":\"vllm_plain.sse\",\"mode\":\"whole\",\"delay\":1.2}");
    CHECK(run_turn(g, &request, &t) == 0);
    CHECK_MSG(t.waiting >= 2, "%d WAITING events", t.waiting);
    CHECK(g->ops->result(g)->ttft_seconds >= 1.0);
    turn_free(&t);

    /* a broken chunked stream and a clean close, both before the finish */
    snprintf(next, sizeof next, "{\"fixture\":\"vllm_plain.sse\",\"mode\":\"cut\",\"cut_after\":%ld}", cut);
    next_reply(next);
    CHECK(run_turn(g, &request, &t) == 0);
    CHECK_STR(event_log_text(&t.log), "C|Hello\nC|! 你好\nS|error\n");
    CHECK_MSG(strstr(g->ops->result(g)->error, ": the server closed the stream early (") != NULL,
              "%s", g->ops->result(g)->error);
    turn_free(&t);
    snprintf(next, sizeof next, "{\"fixture\":\"vllm_plain.sse\",\"mode\":\"eof\",\"cut_after\":%ld}", cut + 7);
    next_reply(next);
    CHECK(run_turn(g, &request, &t) == 0);
    CHECK_STR(event_log_text(&t.log), "C|Hello\nC|! 你好\nS|error\n");
    char expected[128];
    snprintf(expected, sizeof expected, "server %s: the server closed the stream early", url);
    CHECK_STR(g->ops->result(g)->error, expected);
    turn_free(&t);

    /* the connection drops twice before any reply: tried again, then answered */
    size_t before = logged_count();
    next_reply("{\"mode\":\"slam\"}");
    next_reply("{\"mode\":\"slam\"}");
    next_reply("{\"fixture\":\"vllm_plain.sse\",\"mode\":\"whole\"}");
    CHECK(run_turn(g, &request, &t) == 0);
    CHECK_STR(g->ops->result(g)->error, "");
    CHECK_STR(t.content.data, "Hello! 你好，世界 🌍 done.");
    CHECK_INT(logged_count() - before, 3);
    turn_free(&t);

    /* start while an answer runs */
    next_reply("{\"fixture\":\"vllm_plain.sse\",\"mode\":\"whole\",\"delay\":0.5}");
    kimi_err err = {0};
    before = logged_count();
    CHECK(g->ops->start(g, &request, &err) == 0);
    CHECK(g->ops->start(g, &request, &err) == KIMI_ERR_STATE);
    for (int i = 0; i < 200 && logged_count() == before; i++)
        usleep(10000);      /* the server took the reply queued for it */
    g->ops->close(g);       /* closing mid-answer joins the thread */

    /* the idle timeout: a stall of more than 1 s fails the answer, keeping what came */
    g = open_gen("kimi-k2.5-test", OPENAI_DIALECT_SERVER, 1);
    if (!g)
        return;
    snprintf(next, sizeof next, "{\"fixture\":\"vllm_plain.sse\",\"mode\":\"stall\",\"stall_after\":%ld}", cut);
    next_reply(next);
    before = logged_count();
    double t0 = now_s();
    CHECK(run_turn(g, &request, &t) == 0);
    CHECK_INT(logged_count() - before, 1);     /* a silent server is not asked again */
    double idle_s = now_s() - t0;
    CHECK_MSG(idle_s > 1 && idle_s < 2, "the idle timeout of 1 s fired after %.2f s", idle_s);
    CHECK_STR(event_log_text(&t.log), "C|Hello\nC|! 你好\nS|error\n");
    snprintf(expected, sizeof expected, "server %s: no data from the server for 1 s", url);
    CHECK_STR(g->ops->result(g)->error, expected);
    turn_free(&t);
    g->ops->close(g);
}

/* A server that streams without end (issue 18): the answer stops once it is longer than the
 * context can hold (262144 tokens from /v1/models, at 32 bytes a token), with an error, and no
 * more than that is kept; before, the app took it all into memory. */
static void test_flood(void)
{
    generator *g = open_gen("kimi-k2.5-test", OPENAI_DIALECT_SERVER, 120);
    if (!g)
        return;
    next_reply("{\"fixture\":\"vllm_plain.sse\",\"mode\":\"flood\"}");
    one_user_message("hi");
    turn t = {0};
    CHECK(run_turn(g, &request, &t) == 0);
    const char *e = g->ops->result(g)->error;
    CHECK_MSG(strstr(e, "the answer is over 8388608 bytes") != NULL, "%s", e);
    CHECK_MSG(t.content.len <= 8388608 && t.content.len > 8000000, "%zu bytes kept", t.content.len);
    turn_free(&t);
    g->ops->close(g);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setenv("KIMI_TEST_KEY", test_key, 1);
    setenv("NO_PROXY", "127.0.0.1,localhost", 1);   /* only ever 127.0.0.1, never via a proxy */
    setenv("no_proxy", "127.0.0.1,localhost", 1);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (server_start()) {
        fprintf(stderr, "test_generator_remote: cannot start tests/remote/server.py\n");
        return 1;
    }
    chat_conversation_init(&conv);
    test_open();
    test_replays();
    test_tool_round_trip();
    test_http_errors();
    test_cancel_and_early_ends();
    test_flood();
    chat_conversation_free(&conv);
    server_stop();
    curl_global_cleanup();
    return check_finish();
}
