/* sse: the framing of server-sent events (text/event-stream, as the WHATWG HTML standard
 * defines it): bytes in, split anywhere, whole events out with their data lines joined by "\n". */
#ifndef KIMI_APP_SSE_H
#define KIMI_APP_SSE_H

#include <stddef.h>

#include "engine/base/error.h"

typedef struct sse_parser sse_parser;

/* One dispatched event: type is the last "event:" field ("message" when none), data the
 * "data:" lines joined by "\n" (data[len] is 0; it may hold NUL bytes). Return nonzero to stop
 * the feed that delivered it (sse_feed then returns that value). */
typedef int (*sse_event_fn)(void *user, const char *type, const char *data, size_t len);

/* max_event_bytes bounds a line and an event's data (a stream that never ends a line cannot
 * eat the memory); 0 means 16 MiB. */
int sse_create(sse_parser **out, size_t max_event_bytes, kimi_err *err);
void sse_free(sse_parser *p);

/* Feed bytes[0..n): every event completed by them is dispatched, in order. Lines end with CRLF,
 * LF or CR (a CR at the end of one feed and an LF at the start of the next are one ending);
 * ":" lines are comments; a UTF-8 byte-order mark at the start is skipped; "id" and "retry"
 * are ignored. Returns 0, the callback's nonzero value, or -1 with err set (an event over the
 * bound, out of memory); after -1 the parser ignores further input. */
int sse_feed(sse_parser *p, const char *bytes, size_t n, sse_event_fn on_event, void *user,
             kimi_err *err);

/* The stream ended. A last event whose data lines were all complete but that lacks the blank
 * line is still dispatched (servers that close right after "data: [DONE]\n"); a line cut off
 * by the end is dropped, as the standard says. Returns like sse_feed. */
int sse_end(sse_parser *p, sse_event_fn on_event, void *user, kimi_err *err);

#endif
