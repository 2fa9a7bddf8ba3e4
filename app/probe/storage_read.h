/* storage_read: how fast the storage itself reads a set of files (sequential reads in large
 * requests, past the page cache), and how much of them the page cache holds, so that a load's
 * speed can be judged against the disk it came from. */
#ifndef KIMI_APP_STORAGE_READ_H
#define KIMI_APP_STORAGE_READ_H

#include <stddef.h>

#include "engine/base/error.h"

typedef struct {
    size_t bytes;                   /* read */
    double seconds;                 /* wall clock of the reads (opens included) */
    int files;                      /* files read from, whole or in part */
    int direct_files;               /* of those, read with O_DIRECT (the page cache bypassed) */
    int dropped_files;              /* of those, read through the page cache after dropping its
                                       pages of the file (posix_fadvise DONTNEED): the file
                                       system refused O_DIRECT */
} storage_read_result;

/* Read up to sample_bytes of paths[0..n), each file from its start, file after file, in
 * request_bytes reads (a multiple of 4096) with O_DIRECT where the file system takes it, else
 * after dropping the file's cached pages (and once more afterwards, so that a load measured
 * next does not find them cached). KIMI_ERR_USAGE for a bad size, KIMI_ERR_IO naming the file
 * that cannot be read. */
int storage_read_sample(const char *const *paths, int n, size_t sample_bytes, size_t request_bytes,
                        storage_read_result *out, kimi_err *err);

/* Ask the kernel to drop the cached pages of paths[0..n) (posix_fadvise DONTNEED: it drops
 * the clean pages nobody holds; no privilege needed), so that the next read comes from the
 * storage. */
int storage_drop_cache(const char *const *paths, int n, kimi_err *err);

/* Bytes of paths[0..n) in the page cache now (mincore over a mapping of each file), of
 * *total_bytes, their size. */
int storage_cached_bytes(const char *const *paths, int n, size_t *cached_bytes, size_t *total_bytes, kimi_err *err);

/* bytes / seconds in GB/s (1e9 B); 0 when seconds is not positive. */
double storage_gb_per_s(size_t bytes, double seconds);

#endif
