/* file_io: whole-file reads. */
#include "engine/base/file_io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/array.h"

int file_read_all(const char *path, char **data, size_t *size, kimi_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return kimi_fail(err, errno == ENOENT ? KIMI_ERR_MODEL : KIMI_ERR_IO, "%s: cannot open: %s", path,
                         strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (array_reserve(&buf, &cap, n + (1 << 16) + 1, 1)) {
            free(buf);
            fclose(f);
            return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", path);
        }
        errno = 0;
        got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
    } while (got > 0);
    int failed = ferror(f), why = errno;
    fclose(f);
    if (failed) {
        free(buf);
        /* a folder opens fine and fails here: say so rather than a bare "read error" */
        return kimi_fail(err, KIMI_ERR_IO, "%s: cannot read: %s", path,
                         why == EISDIR ? "it is a folder, not a file" : why ? strerror(why) : "read error");
    }
    buf[n] = 0;
    *data = buf;
    *size = n;
    return 0;
}
