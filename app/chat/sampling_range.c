/* sampling_range: a table of ranges and strtod/strtoull with every way a value can be bad. */
#include "app/chat/sampling_range.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    int is_number;
    double lo, hi;      /* numbers: [lo, hi], or (lo, hi] when lo_open */
    int lo_open;
    uint64_t max;       /* whole numbers: 0 .. max */
} ranges[] = {
    [SAMPLING_TEMPERATURE] = {1, 0, 100, 0, 0},
    [SAMPLING_TOP_P] = {1, 0, 1, 1, 0},
    [SAMPLING_TOP_K] = {0, 0, 0, 0, 1u << 30},
    [SAMPLING_MAX_TOKENS] = {0, 0, 0, 0, 1u << 30},
    [SAMPLING_SEED] = {0, 0, 0, 0, UINT64_MAX},
};

int sampling_parse(sampling_setting s, const char *text, const char *what, int code, double *number,
                   uint64_t *integer, kimi_err *err)
{
    char *end = (char *)text;
    errno = 0;
    if (ranges[s].is_number) {
        /* decimal only: strtod would also take hex ("0x10" = 16, "0x1p3" = 8); the rest is
         * refused below (end stays at the first character, v is NaN) */
        int decimal = !isspace((unsigned char)text[0]) && !strpbrk(text, "xX");
        double v = decimal ? strtod(text, &end) : NAN;
        if (!*text || *end || !isfinite(v) || v < ranges[s].lo || v > ranges[s].hi ||
            (ranges[s].lo_open && v == ranges[s].lo))
            return kimi_fail(err, code, "%s: must be a number in %s%g, %g]", what,
                             ranges[s].lo_open ? "(" : "[", ranges[s].lo, ranges[s].hi);
        *number = v + 0.0; /* -0 is 0 (shown as "temperature 0", sent as 0) */
        return 0;
    }
    unsigned long long v = isdigit((unsigned char)text[0]) ? strtoull(text, &end, 10) : 0;
    if (!isdigit((unsigned char)text[0]) || *end || errno == ERANGE || v > ranges[s].max)
        return kimi_fail(err, code, "%s: must be a whole number from 0 to %llu", what,
                         (unsigned long long)ranges[s].max);
    *integer = v;
    return 0;
}
