/* generator: where answers come from, behind one interface the turn loop drives: the
 * in-process engine (generator_local: render -> engine -> stream parser) or an OpenAI-compatible
 * server (a remote generator). A turn's output arrives as the stream parser's events
 * (engine/text/parse.h: reasoning, content, tool-call begin/id/args/end, notes, stop) plus progress
 * reports, whichever side produced them; the front ends never see tokens or HTTP. */
#ifndef KIMI_APP_GENERATOR_H
#define KIMI_APP_GENERATOR_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/text/chat.h"
#include "engine/base/error.h"
#include "engine/text/parse.h"

typedef struct {
    const chat_conversation *conv;  /* the whole conversation so far; the answer follows it */
    const json_t *tools;            /* OpenAI function definitions, or NULL */
    int thinking;                   /* 1: the model reasons first */
    float temperature;              /* 0 = greedy */
    float top_p;                    /* (0, 1] */
    int top_k;                      /* 0 = off */
    int max_tokens;                 /* 0 = until the context is full */
    int max_tokens_fit;             /* 1: max_tokens is a cap that shrinks to the room the prompt
                                       leaves in the context (a /compact summary), where the
                                       generator knows both (local); 0: a max_tokens that does not
                                       fit is refused */
    uint64_t seed;
} generator_request;

typedef enum {
    GENERATOR_PROGRESS_LOAD,        /* done/total in bytes */
    GENERATOR_PROGRESS_PREFILL,     /* done/total in prompt tokens */
    GENERATOR_PROGRESS_WAITING,     /* remote: connected, waiting for the first byte (total 0) */
} generator_progress_kind;

typedef struct {
    generator_progress_kind kind;
    double done, total;
    double seconds;                 /* since the phase began */
    double rate;                    /* done per second */
    double eta_seconds;             /* seconds left at that rate; -1 = unknown */
} generator_progress;

typedef enum { GENERATOR_EVENT_PARSE, GENERATOR_EVENT_PROGRESS } generator_event_kind;

typedef struct {
    generator_event_kind kind;
    parse_event parse;              /* PARSE: valid during the callback only */
    int tokens;                     /* PARSE: tokens generated so far in this answer */
    generator_progress progress;    /* PROGRESS */
} generator_event;

typedef void (*generator_event_fn)(void *user, const generator_event *ev);

/* What a finished answer cost; filled when generator_pump returns 1. */
typedef struct {
    int prompt_tokens;              /* the rendered conversation (remote: usage.prompt_tokens) */
    int reused_tokens;              /* of those, served from the cache (remote: cached tokens,
                                       when the server reports them) */
    int generated_tokens;
    double ttft_seconds;            /* start to the first generated token */
    double prefill_tok_s;
    double decode_tok_s;
    int drafted_tokens;             /* speculative decoding: tokens drafted and verified (local) */
    int accepted_tokens;            /* of those, taken */
    const int32_t *ids;             /* [n_ids] the generated ids (local only; else NULL) */
    size_t n_ids;
    char error[512];                /* why the answer failed (the engine or the server said so),
                                       "" otherwise; the parse events then end with
                                       PARSE_STOP_ERROR */
} generator_result;

typedef struct generator generator;

typedef struct {
    /* Start an answer. The request's pointers are read before start returns. */
    int (*start)(generator *g, const generator_request *req, kimi_err *err);
    /* Readable (POLLIN) while events are waiting. */
    int (*event_fd)(const generator *g);
    /* Deliver what has arrived, without blocking; 1 once the answer is complete (its last parse
     * event was PARSE_STOP and result is filled), 0 while it goes on; nonzero err only when the
     * generator itself broke (out of memory). */
    int (*pump)(generator *g, generator_event_fn on_event, void *user, kimi_err *err);
    /* Stop the running answer soon; what came stays, and pump ends it with PARSE_STOP_CANCELLED. */
    void (*cancel)(generator *g);
    const generator_result *(*result)(const generator *g);
    void (*close)(generator *g);
} generator_ops;

struct generator {
    const generator_ops *ops;
    char model[128];                /* "demo model", "Kimi-K2.5-NVFP4", the server's model */
    char backend[128];              /* "cpu TP=1", "cuda TP=8", "server http://host:8000" */
    char summary[1536];             /* the plan (local: ranks, threads, memory, KV-cache notes)
                                       or the server's details, one or more lines: in /stats,
                                       said at start with --verbose */
    long context_limit;             /* positions an answer and its prompt may fill; 0 = unknown */
    char speculation[48];           /* "auto", "4 tokens", "off" (local); "" where it is not ours */
};

#endif
