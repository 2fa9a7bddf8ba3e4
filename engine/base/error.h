/* error: the one error type every fallible function fills, a one-line message naming the
 * file, tensor, field or flag at fault, plus the exit-code class it maps to. */
#ifndef KIMI_ERROR_H
#define KIMI_ERROR_H

enum kimi_status {
    KIMI_OK = 0,
    KIMI_ERR_USAGE = 2,   /* bad flag or argument: exit code 2 */
    KIMI_ERR_MODEL = 3,   /* the checkpoint (files, JSON, tensors) is at fault: exit code 3 */
    KIMI_ERR_IO = 4,      /* the system refused (open, mmap, read, write) */
    KIMI_ERR_NOMEM = 5,   /* an allocation failed or a size overflowed */
    KIMI_ERR_INPUT = 6,   /* user data at fault (script, session, request) */
    KIMI_ERR_STATE = 7,   /* API misuse: unknown request id, engine closed, context full */
    KIMI_ERR_CANCELLED = 8, /* the caller stopped it (a load cancelled by Ctrl-C) */
};

typedef struct kimi_err {
    int code;        /* one of enum kimi_status, 0 when nothing failed */
    char msg[512];   /* one line, no trailing newline */
} kimi_err;

/* Fill err (may be NULL) with a printf-formatted message and return code. */
int kimi_fail(kimi_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix the message a failed callee left in err (may be NULL): "context: previous message".
 * Returns code, the callee's status (passed in because a NULL err holds none). */
int kimi_err_prefix(kimi_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
