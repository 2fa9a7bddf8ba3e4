/* openai_request: endpoint URLs and the chat-completions request body. */
#include "app/chat/openai_request.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

void openai_endpoints_free(openai_endpoints *e)
{
    free(e->chat_url);
    free(e->models_url);
    free(e->origin);
    free(e->base);
    free(e->host);
    *e = (openai_endpoints){0};
}

static char *printf_alloc(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *printf_alloc(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    return n < 0 ? NULL : s;
}

static int ends_with(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return len >= n && !memcmp(s + len - n, suffix, n);
}

int openai_endpoints_parse(openai_endpoints *e, const char *url, kimi_err *err)
{
    *e = (openai_endpoints){0};
    if (!url || !*url)
        return kimi_fail(err, KIMI_ERR_USAGE, "server URL: empty");
    for (const char *c = url; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == 0x7f)
            return kimi_fail(err, KIMI_ERR_USAGE,
                             "server URL: white space or a control character in it");
    const char *scheme;
    size_t skip;
    if (!strncasecmp(url, "http://", 7)) {
        scheme = "http";
        skip = 7;
    } else if (!strncasecmp(url, "https://", 8)) {
        scheme = "https";
        skip = 8;
    } else {
        return kimi_fail(err, KIMI_ERR_USAGE, "server URL: must begin with http:// or https://");
    }
    const char *auth = url + skip;
    size_t auth_len = strcspn(auth, "/?#");
    const char *rest = auth + auth_len;
    if (strpbrk(rest, "?#"))
        return kimi_fail(err, KIMI_ERR_USAGE, "server URL: a query or fragment is not supported");
    /* user:pass@ stays in the request URLs only */
    const char *hostport = auth;
    for (size_t i = 0; i < auth_len; i++)
        if (auth[i] == '@')
            hostport = auth + i + 1;
    size_t hostport_len = (size_t)(auth + auth_len - hostport);
    size_t host_len = hostport_len;
    if (hostport_len && hostport[0] == '[') {
        const char *close = memchr(hostport, ']', hostport_len);
        if (!close)
            return kimi_fail(err, KIMI_ERR_USAGE, "server URL: an IPv6 address without ']'");
        host_len = (size_t)(close - hostport) + 1;
    } else {
        const char *colon = memchr(hostport, ':', hostport_len);
        if (colon)
            host_len = (size_t)(colon - hostport);
    }
    if (host_len == 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "server URL: no host");
    if (host_len < hostport_len) {
        const char *port = hostport + host_len + 1;
        size_t port_len = hostport_len - host_len - 1;
        if (hostport[host_len] != ':' || port_len == 0 || port_len > 5 ||
            strspn(port, "0123456789") < port_len || atoi(port) > 65535)
            return kimi_fail(err, KIMI_ERR_USAGE, "server URL: a bad port");
    }
    /* the path: drop trailing slashes and a final endpoint, then make it end with /v1 */
    size_t path_len = strlen(rest);
    for (int changed = 1; changed;) {
        changed = 0;
        while (path_len && rest[path_len - 1] == '/')
            path_len--, changed = 1;
        if (ends_with(rest, path_len, "/chat/completions"))
            path_len -= strlen("/chat/completions"), changed = 1;
        else if (ends_with(rest, path_len, "/models"))
            path_len -= strlen("/models"), changed = 1;
    }
    const char *v1 = ends_with(rest, path_len, "/v1") ? "" : "/v1";
    int prefix_len = (int)(hostport - url);   /* scheme://user:pass@ */
    e->chat_url = printf_alloc("%.*s%.*s%.*s%s/chat/completions", prefix_len, url,
                               (int)hostport_len, hostport, (int)path_len, rest, v1);
    e->models_url = printf_alloc("%.*s%.*s%.*s%s/models", prefix_len, url, (int)hostport_len,
                                 hostport, (int)path_len, rest, v1);
    e->origin = printf_alloc("%s://%.*s", scheme, (int)hostport_len, hostport);
    e->base = printf_alloc("%s://%.*s%.*s%s", scheme, (int)hostport_len, hostport, (int)path_len,
                           rest, v1);
    e->host = printf_alloc("%.*s", (int)host_len, hostport);
    if (!e->chat_url || !e->models_url || !e->origin || !e->base || !e->host) {
        openai_endpoints_free(e);
        return kimi_fail(err, KIMI_ERR_NOMEM, "server URL: out of memory");
    }
    /* the scheme as given may be upper case; curl and people want it lower */
    memcpy(e->chat_url, scheme, strlen(scheme));
    memcpy(e->models_url, scheme, strlen(scheme));
    for (char *c = e->host; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    for (char *c = e->origin + strlen(scheme) + 3; *c && *c != ':' && *c != ']'; c++)
        *c = (char)tolower((unsigned char)*c);
    for (char *c = e->base + strlen(scheme) + 3; *c && *c != ':' && *c != ']' && *c != '/'; c++)
        *c = (char)tolower((unsigned char)*c);
    return 0;
}

static int host_is(const char *host, const char *domain)
{
    size_t h = strlen(host), d = strlen(domain);
    return h == d ? !strcmp(host, domain)
                  : h > d && host[h - d - 1] == '.' && !strcmp(host + h - d, domain);
}

openai_dialect openai_dialect_resolve(openai_dialect d, const char *host)
{
    if (d != OPENAI_DIALECT_AUTO)
        return d;
    return host && (host_is(host, "moonshot.ai") || host_is(host, "moonshot.cn") ||
                    host_is(host, "kimi.com"))
               ? OPENAI_DIALECT_MOONSHOT : OPENAI_DIALECT_SERVER;
}

const char *openai_dialect_name(openai_dialect d)
{
    switch (d) {
    case OPENAI_DIALECT_MOONSHOT: return "Moonshot";
    case OPENAI_DIALECT_BOTH: return "vLLM/SGLang and Moonshot";
    default: return "vLLM/SGLang";
    }
}

/* The float as the shortest decimal that reads back as it (0.7f -> 0.7, not 0.699999988). */
static double shortest(float f)
{
    char text[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, (double)f);
        double d = strtod(text, NULL);
        if ((float)d == f)
            return d;
    }
    return (double)f;
}

static int set_new(json_t *obj, const char *key, json_t *value)
{
    return !value || json_object_set_new(obj, key, value);
}

char *openai_request_body(const generator_request *req, const char *model, openai_dialect d,
                          kimi_err *err)
{
    json_t *body = json_object();
    json_t *messages = req->conv ? chat_conversation_to_json(req->conv) : json_array();
    if (!body || !messages) {
        json_decref(body);
        json_decref(messages);
        kimi_fail(err, KIMI_ERR_NOMEM, "server request: out of memory building the body");
        return NULL;
    }
    int bad = set_new(body, "model", json_string(model ? model : ""));
    size_t i;
    json_t *m;
    /* Moonshot's API refuses an assistant tool-call message without reasoning_content while
       thinking is on; one that had none (made with thinking off) gets an empty one */
    if (req->thinking) {
        json_array_foreach(messages, i, m) {
            if (json_object_get(m, "tool_calls") && !json_object_get(m, "reasoning_content") &&
                json_is_string(json_object_get(m, "role")) &&
                !strcmp(json_string_value(json_object_get(m, "role")), "assistant"))
                bad |= set_new(m, "reasoning_content", json_string(""));
        }
    }
    bad = json_object_set_new(body, "messages", messages) || bad ||   /* takes messages */
          set_new(body, "stream", json_true());
    if (!bad) {
        json_t *opts = json_object();
        bad = !opts || set_new(opts, "include_usage", json_true()) ||
              json_object_set_new(body, "stream_options", opts);
    }
    if (!bad && json_is_array(req->tools) && json_array_size(req->tools)) {
        json_t *tools = json_deep_copy(req->tools);
        bad = set_new(body, "tools", tools) || set_new(body, "tool_choice", json_string("auto"));
    }
    int server = d != OPENAI_DIALECT_MOONSHOT, moonshot = d != OPENAI_DIALECT_SERVER;
    if (!bad && server) {
        bad = set_new(body, "temperature", json_real(shortest(req->temperature))) ||
              set_new(body, "top_p", json_real(shortest(req->top_p))) ||
              (req->top_k > 0 && set_new(body, "top_k", json_integer(req->top_k))) ||
              set_new(body, "seed", json_integer((json_int_t)(req->seed & INT64_MAX)));
        json_t *kwargs = json_object();
        bad = bad || !kwargs || set_new(kwargs, "thinking", json_boolean(req->thinking)) ||
              json_object_set_new(body, "chat_template_kwargs", kwargs);
    }
    if (!bad && moonshot) {
        json_t *thinking = json_object();
        bad = !thinking ||
              set_new(thinking, "type", json_string(req->thinking ? "enabled" : "disabled")) ||
              json_object_set_new(body, "thinking", thinking);
    }
    if (!bad && req->max_tokens > 0)
        bad = set_new(body, "max_tokens", json_integer(req->max_tokens));
    char *text = bad ? NULL : json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(body);
    if (!text)
        kimi_fail(err, KIMI_ERR_NOMEM, "server request: out of memory building the body");
    return text;
}
