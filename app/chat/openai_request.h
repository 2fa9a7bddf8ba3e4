/* openai_request: what goes to an OpenAI-compatible server: its endpoints from the URL the user
 * gave, and the JSON body of a streamed chat-completions request built from a generator request. */
#ifndef KIMI_APP_OPENAI_REQUEST_H
#define KIMI_APP_OPENAI_REQUEST_H

#include "app/chat/generator.h"
#include "engine/base/error.h"

/* How a server wants thinking switched and which sampling fields it takes. */
typedef enum {
    OPENAI_DIALECT_AUTO,        /* MOONSHOT for api.moonshot.ai, api.moonshot.cn and api.kimi.com
                                   (and their subdomains), SERVER for every other host */
    OPENAI_DIALECT_SERVER,      /* vLLM, SGLang: "chat_template_kwargs": {"thinking": bool} (the
                                   Kimi-K2.5 chat template's switch) and every sampling field */
    OPENAI_DIALECT_MOONSHOT,    /* Moonshot's API: "thinking": {"type": "enabled"|"disabled"};
                                   temperature, top_p, top_k and seed are left out (kimi-k2.5
                                   fixes them and refuses other values) */
    OPENAI_DIALECT_BOTH,        /* both thinking switches and every sampling field (a proxy in
                                   front of either kind; servers ignore fields they lack) */
} openai_dialect;

typedef struct {
    char *chat_url;             /* ".../v1/chat/completions", with any user:pass@ of the URL */
    char *models_url;           /* ".../v1/models", likewise */
    char *origin;               /* "http://host:8000": no credentials, no path */
    char *base;                 /* "http://host:8000/v1": no credentials; for messages */
    char *host;                 /* "host", lowercase */
} openai_endpoints;

/* http:// or https:// (any case), a host, an optional port and path; no query or fragment.
 * The path is normalised: trailing slashes, a final /chat/completions or /models go, and /v1
 * is added unless the path ends with it ("http://h:8000", "http://h:8000/v1/" and
 * "http://h:8000/v1/chat/completions" all give http://h:8000/v1/chat/completions). Errors are
 * KIMI_ERR_USAGE and never repeat the credentials. */
int openai_endpoints_parse(openai_endpoints *e, const char *url, kimi_err *err);
void openai_endpoints_free(openai_endpoints *e);

/* AUTO resolved by the host; other dialects as they are. */
openai_dialect openai_dialect_resolve(openai_dialect d, const char *host);
/* "vLLM/SGLang", "Moonshot", "vLLM/SGLang and Moonshot" for summaries. */
const char *openai_dialect_name(openai_dialect d);

/* The request body (malloc'ed, NUL-terminated JSON): model, messages (the conversation in
 * OpenAI form, with reasoning_content on assistant messages that have it, and "" on assistant
 * messages with tool calls and none when thinking is on: Moonshot's API refuses them without),
 * "stream": true, "stream_options": {"include_usage": true}, tools with "tool_choice": "auto"
 * when the request has any, the thinking switch and the sampling fields of the dialect
 * (resolved: not AUTO): temperature, top_p, top_k (when not 0), seed (its low 63 bits), and
 * max_tokens (when not 0) in every dialect. */
char *openai_request_body(const generator_request *req, const char *model, openai_dialect d,
                          kimi_err *err);

#endif
