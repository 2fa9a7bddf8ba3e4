/* bench_tokenizer: encode throughput of our tokenizer on one text file (not a test).
 *   bench_tokenizer MODEL_DIR TEXT_FILE [REPEATS [IDS_OUT]]
 * Encodes the whole file REPEATS times (default 5; special tokens allowed, as tiktoken's
 * encode(text, "all")), prints one JSON object with the best time, and writes the ids one per
 * line to IDS_OUT when given, to compare with another encoder. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/model/config.h"
#include "engine/text/tokenizer.h"

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: %s MODEL_DIR TEXT_FILE [REPEATS [IDS_OUT]]\n", argv[0]);
        return 2;
    }
    int repeats = argc > 3 ? atoi(argv[3]) : 5;
    FILE *f = fopen(argv[2], "rb");
    if (!f || repeats < 1) {
        fprintf(stderr, "bench_tokenizer: cannot open %s (or bad REPEATS)\n", argv[2]);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    char *text = malloc((size_t)size);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "bench_tokenizer: cannot read %s\n", argv[2]);
        return 1;
    }
    fclose(f);
    model_config cfg;
    tokenizer *tok = NULL;
    kimi_err err = {0};
    double t0 = seconds_now();
    if (config_load(&cfg, argv[1], &err) || tokenizer_load(&tok, argv[1], &cfg, &err)) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
        return 1;
    }
    double load_s = seconds_now() - t0, best = 1e30;
    int32_t *ids = NULL;
    size_t n = 0;
    for (int r = 0; r < repeats; r++) {
        free(ids);
        t0 = seconds_now();
        if (tokenizer_encode(tok, text, (size_t)size, 1, &ids, &n, &err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
            return 1;
        }
        double dt = seconds_now() - t0;
        if (dt < best)
            best = dt;
    }
    printf("{\"encoder\": \"kimi-chat tokenizer (C)\", \"bytes\": %ld, \"tokens\": %zu, \"vocab\": %d, "
           "\"load_s\": %.4f, \"best_s\": %.4f, \"mb_s\": %.2f}\n",
           size, n, tokenizer_vocab_size(tok), load_s, best, (double)size / 1e6 / best);
    if (argc > 4) {
        FILE *out = fopen(argv[4], "w");
        if (!out) {
            fprintf(stderr, "bench_tokenizer: cannot write %s\n", argv[4]);
            return 1;
        }
        for (size_t i = 0; i < n; i++)
            fprintf(out, "%d\n", ids[i]);
        fclose(out);
    }
    free(ids);
    free(text);
    tokenizer_free(tok);
    config_free(&cfg);
    return 0;
}
