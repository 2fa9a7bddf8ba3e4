/* storage_read: sequential read bandwidth past the page cache, and page-cache residency. */
#include "app/probe/storage_read.h"
#include "engine/base/monotonic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DIRECT_ALIGN 4096

double storage_gb_per_s(size_t bytes, double seconds)
{
    return seconds > 0 ? (double)bytes / seconds / 1e9 : 0;
}

static int drop_file(int fd, const char *path, kimi_err *err)
{
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    return rc ? kimi_fail(err, KIMI_ERR_IO, "%s: posix_fadvise: %s", path, strerror(rc)) : 0;
}

int storage_drop_cache(const char *const *paths, int n, kimi_err *err)
{
    for (int i = 0; i < n; i++) {
        int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return kimi_fail(err, KIMI_ERR_IO, "%s: %s", paths[i], strerror(errno));
        int rc = drop_file(fd, paths[i], err);
        close(fd);
        if (rc)
            return rc;
    }
    return 0;
}

int storage_cached_bytes(const char *const *paths, int n, size_t *cached_bytes, size_t *total_bytes, kimi_err *err)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), cached = 0, total = 0;
    unsigned char *vec = NULL;
    size_t vec_cap = 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st)) {
            rc = kimi_fail(err, KIMI_ERR_IO, "%s: %s", paths[i], strerror(errno));
            if (fd >= 0)
                close(fd);
            break;
        }
        size_t size = (size_t)st.st_size, pages = (size + page - 1) / page;
        total += size;
        if (size == 0) {
            close(fd);
            continue;
        }
        void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (map == MAP_FAILED) {
            rc = kimi_fail(err, KIMI_ERR_IO, "%s: mmap: %s", paths[i], strerror(errno));
            break;
        }
        if (pages > vec_cap) {
            unsigned char *grown = realloc(vec, pages);
            if (!grown) {
                munmap(map, size);
                rc = kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory for %zu page flags", paths[i], pages);
                break;
            }
            vec = grown;
            vec_cap = pages;
        }
        if (mincore(map, size, vec)) {
            rc = kimi_fail(err, KIMI_ERR_IO, "%s: mincore: %s", paths[i], strerror(errno));
        } else {
            for (size_t p = 0; p < pages; p++)
                if (vec[p] & 1)
                    cached += p + 1 < pages ? page : size - p * page;
        }
        munmap(map, size);
    }
    free(vec);
    if (!rc) {
        *cached_bytes = cached;
        *total_bytes = total;
    }
    return rc;
}

/* Read up to `want` bytes of an open file from its start; the bytes read, or -1 (errno). */
static long long read_file(int fd, void *buf, size_t request, size_t want)
{
    size_t got = 0;
    while (got < want) {
        size_t ask = want - got < request ? want - got : request;
        /* O_DIRECT wants whole blocks: ask for a rounded-up length, take what comes */
        size_t aligned = (ask + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
        ssize_t n = pread(fd, buf, aligned, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n < ask ? (size_t)n : ask;
        if ((size_t)n < ask)
            break;
    }
    return (long long)got;
}

int storage_read_sample(const char *const *paths, int n, size_t sample_bytes, size_t request_bytes,
                        storage_read_result *out, kimi_err *err)
{
    memset(out, 0, sizeof *out);
    if (request_bytes == 0 || request_bytes % DIRECT_ALIGN)
        return kimi_fail(err, KIMI_ERR_USAGE, "read requests of %zu bytes: must be a positive multiple of %d",
                         request_bytes, DIRECT_ALIGN);
    if (sample_bytes == 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "a sample of 0 bytes: nothing to measure");
    void *buf = NULL;
    if (posix_memalign(&buf, DIRECT_ALIGN, request_bytes))
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for a %zu-byte read buffer", request_bytes);
    int rc = 0;
    double t0 = monotonic_seconds();
    for (int i = 0; i < n && out->bytes < sample_bytes && !rc; i++) {
        int direct = 1;
        int fd = open(paths[i], O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (fd < 0 && errno == EINVAL) {
            direct = 0;
            fd = open(paths[i], O_RDONLY | O_CLOEXEC);
        }
        if (fd < 0) {
            rc = kimi_fail(err, KIMI_ERR_IO, "%s: %s", paths[i], strerror(errno));
            break;
        }
        if (!direct)
            rc = drop_file(fd, paths[i], err);
        long long got = rc ? 0 : read_file(fd, buf, request_bytes, sample_bytes - out->bytes);
        if (got < 0 && direct && errno == EINVAL) {
            /* the open took O_DIRECT, the reads do not: read it the other way */
            close(fd);
            direct = 0;
            fd = open(paths[i], O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                rc = kimi_fail(err, KIMI_ERR_IO, "%s: %s", paths[i], strerror(errno));
                break;
            }
            rc = drop_file(fd, paths[i], err);
            got = rc ? 0 : read_file(fd, buf, request_bytes, sample_bytes - out->bytes);
        }
        if (!rc && got < 0)
            rc = kimi_fail(err, KIMI_ERR_IO, "%s: read: %s", paths[i], strerror(errno));
        if (!rc) {
            out->bytes += (size_t)got;
            out->files++;
            out->direct_files += direct;
            out->dropped_files += !direct;
        }
        close(fd);
    }
    out->seconds = monotonic_seconds() - t0;
    /* the buffered reads filled the page cache: a load measured next must not find them there */
    if (!rc && out->dropped_files)
        rc = storage_drop_cache(paths, out->files, err);
    free(buf);
    return rc;
}
