/* error: formatting of kimi_err messages. */
#include "engine/base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kimi_fail(kimi_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int kimi_err_prefix(kimi_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    char out[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, sizeof out, fmt, ap);
    va_end(ap);
    size_t used = n < 0 ? 0 : (size_t)n < sizeof out ? (size_t)n : sizeof out - 1;
    size_t room = sizeof out - 1 - used;
    const char *sep = ": ";
    size_t add = strlen(sep) + strlen(err->msg);
    if (add > room)
        add = room;
    memcpy(out + used, sep, add < 2 ? add : 2);
    if (add > 2)
        memcpy(out + used + 2, err->msg, add - 2);
    out[used + add] = 0;
    memcpy(err->msg, out, sizeof out);
    return code;
}
