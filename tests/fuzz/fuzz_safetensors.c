/* fuzz_safetensors: any byte string as a safetensors file image; an accepted one must hand out
 * only views inside the image (every tensor's bytes are read). */
#include <stddef.h>
#include <stdint.h>

#include "engine/model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    safetensors_set *set;
    kimi_err err;
    if (safetensors_open_memory(&set, data, size, "fuzz.safetensors", &err))
        return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < safetensors_count(set); i++) {
        const st_tensor *t = safetensors_at(set, i);
        if (safetensors_find(set, t->name) != t)
            __builtin_trap();
        for (size_t b = 0; b < t->bytes; b++)
            sink ^= t->data[b];
    }
    (void)sink;
    safetensors_close(set);
    return 0;
}
