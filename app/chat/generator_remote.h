/* generator_remote: answers from an OpenAI-compatible server (vLLM, SGLang, Moonshot's API)
 * behind app/chat/generator.h: libcurl streams the reply in a thread of its own and pump turns the
 * bytes that came into parse events, so the UI thread never waits on the network. */
#ifndef KIMI_APP_GENERATOR_REMOTE_H
#define KIMI_APP_GENERATOR_REMOTE_H

#include "app/chat/generator.h"
#include "app/chat/openai_request.h"
#include "engine/base/error.h"

typedef struct {
    const char *url;            /* http(s)://host[:port][/v1]: required (openai_endpoints_parse) */
    const char *model;          /* NULL or "": the first model GET /v1/models lists */
    const char *api_key_env;    /* the variable holding the API key. NULL: OPENAI_API_KEY, and
                                   then an unset variable means no key (local servers need
                                   none); a variable named here must be set */
    const char *api_key_file;   /* a file whose first line is the key; wins over the variable */
    openai_dialect dialect;     /* default OPENAI_DIALECT_AUTO */
    long connect_timeout_ms;    /* default 10000 */
    long idle_timeout_s;        /* default 120: a reply with no byte for this long fails */
    int retries;                /* default 3: tries again after a connection failure before the
                                   first byte of the reply, waiting retry_delay_ms, then twice
                                   as long each time */
    long retry_delay_ms;        /* default 500 */
} remote_options;

/* The defaults above; url must still be set. */
void remote_options_init(remote_options *o);

/* Connect once to GET /v1/models (blocking, bounded by the timeouts): the model's name when
 * none is given and its context (max_model_len, where vLLM and SGLang report it). Fills
 * model (the server's model name), backend ("server http://host:8000", never credentials),
 * summary and context_limit (0 when unknown). The API key is read here, kept in memory only
 * (wiped at close), sent as "Authorization: Bearer KEY" and never written into any field,
 * message or body. Fails with a one-line message: a bad URL or option (KIMI_ERR_USAGE), a
 * missing key (KIMI_ERR_USAGE), a server that cannot be reached or refuses (KIMI_ERR_IO). */
int generator_remote_open(generator **out, const remote_options *o, kimi_err *err);

#endif
