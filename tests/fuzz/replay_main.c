/* replay_main: runs a fuzz target's LLVMFuzzerTestOneInput over every file of its corpus
 * directory, so the regression corpus is replayed by ctest in builds without libFuzzer. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/file_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    char *data;
    size_t size;
    kimi_err err = {0};
    if (file_read_all(path, &data, &size, &err)) {
        fprintf(stderr, "replay: %s\n", err.msg);
        return 1;
    }
    LLVMFuzzerTestOneInput((const uint8_t *)data, size);
    free(data);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        fprintf(stderr, "replay: cannot open corpus directory %s\n", argv[1]);
        return 1;
    }
    int files = 0, failures = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        failures += replay_file(path);
        files++;
    }
    closedir(d);
    printf("replayed %d corpus files\n", files);
    if (files == 0) {
        fprintf(stderr, "replay: corpus %s is empty\n", argv[1]);
        return 1;
    }
    return failures ? 1 : 0;
}
