/* test_storage_read: the storage bandwidth sample (how much it reads of which files, in
 * aligned requests, O_DIRECT or the cache dropped first), page-cache residency, the GB/s
 * arithmetic, and the errors naming a bad size or the file that cannot be read. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/probe/storage_read.h"
#include "tests/unit/check.h"

static char dir[] = "/tmp/test_storage_read.XXXXXX";
static char paths[4][64];
static const size_t sizes[3] = {10000, 0, (3u << 20) + 123};

static void write_file(const char *path, size_t size)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (size_t i = 0; f && i < size; i++)
        fputc((int)(i * 7 % 251), f);
    if (f)
        fclose(f);
}

/* Read a file through the page cache, as any program would. */
static void read_buffered(const char *path)
{
    char buf[65536];
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    while (fd >= 0 && read(fd, buf, sizeof buf) > 0)
        ;
    if (fd >= 0)
        close(fd);
}

static void test_sample(const char *const *files)
{
    kimi_err err = {0};
    storage_read_result r;
    size_t all = sizes[0] + sizes[1] + sizes[2];
    /* more than there is: every byte of every file, in 1 MiB requests (the last one short) */
    CHECK_INT(storage_read_sample(files, 3, all * 2, 1 << 20, &r, &err), 0);
    CHECK(r.bytes == all && r.files == 3 && r.direct_files + r.dropped_files == 3 && r.seconds >= 0);
    /* part of the first file, then exactly the first file: the next one is not opened */
    CHECK_INT(storage_read_sample(files, 3, 5000, 4096, &r, &err), 0);
    CHECK(r.bytes == 5000 && r.files == 1);
    CHECK_INT(storage_read_sample(files, 3, sizes[0], 4096, &r, &err), 0);
    CHECK(r.bytes == sizes[0] && r.files == 1);
    /* into the third file, in requests smaller than it */
    CHECK_INT(storage_read_sample(files, 3, sizes[0] + 12345, 8192, &r, &err), 0);
    CHECK(r.bytes == sizes[0] + 12345 && r.files == 3);

    CHECK_INT(storage_read_sample(files, 3, all, 1000, &r, &err), KIMI_ERR_USAGE);
    CHECK_MSG(strstr(err.msg, "1000 bytes") != NULL, "%s", err.msg);
    CHECK_INT(storage_read_sample(files, 3, 0, 4096, &r, &err), KIMI_ERR_USAGE);
    const char *missing[] = {files[0], paths[3]};
    CHECK_INT(storage_read_sample(missing, 2, all, 4096, &r, &err), KIMI_ERR_IO);
    CHECK_MSG(strstr(err.msg, paths[3]) != NULL, "%s", err.msg);
}

static void test_residency(const char *const *files)
{
    kimi_err err = {0};
    size_t cached = 1, total = 0;
    read_buffered(files[2]);
    CHECK_INT(storage_cached_bytes(files + 2, 1, &cached, &total, &err), 0);
    CHECK(total == sizes[2]);
    /* just read: every page of it in the cache (the last one counted for its bytes only) */
    CHECK_MSG(cached == sizes[2], "%zu of %zu bytes cached", cached, total);
    CHECK_INT(storage_cached_bytes(files, 3, &cached, &total, &err), 0);
    CHECK(total == sizes[0] + sizes[1] + sizes[2] && cached <= total);
    /* dropping is advice the kernel may not take (tmpfs keeps its pages): only that it runs */
    CHECK_INT(storage_drop_cache(files, 3, &err), 0);
    const char *missing[] = {paths[3]};
    CHECK_INT(storage_cached_bytes(missing, 1, &cached, &total, &err), KIMI_ERR_IO);
    CHECK_INT(storage_drop_cache(missing, 1, &err), KIMI_ERR_IO);
    CHECK_MSG(strstr(err.msg, paths[3]) != NULL, "%s", err.msg);
}

static void test_arithmetic(void)
{
    CHECK_NEAR(storage_gb_per_s(2000000000u, 0.5), 4.0, 1e-12);
    CHECK_NEAR(storage_gb_per_s(7037648, 0.017), 7037648 / 0.017 / 1e9, 1e-12);
    CHECK_NEAR(storage_gb_per_s(123, 0), 0, 0);
    CHECK_NEAR(storage_gb_per_s(123, -1), 0, 0);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    const char *files[3];
    for (int i = 0; i < 4; i++)
        snprintf(paths[i], sizeof paths[i], "%s/shard-%d", dir, i);
    for (int i = 0; i < 3; i++) {
        write_file(paths[i], sizes[i]);
        files[i] = paths[i];
    }
    test_sample(files);
    test_residency(files);
    test_arithmetic();
    for (int i = 0; i < 3; i++)
        unlink(paths[i]);
    rmdir(dir);
    return check_finish();
}
