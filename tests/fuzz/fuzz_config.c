/* fuzz_config: the first byte picks one of the model directory's JSON files, the rest is its
 * text; parsing and validation must fail cleanly or give a config that frees cleanly. */
#include <stddef.h>
#include <stdint.h>

#include "engine/model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const files[] = {"config.json", "hf_quant_config.json", "generation_config.json",
                                        "tokenizer_config.json"};
    if (size == 0)
        return 0;
    model_config cfg;
    kimi_err err;
    config_init(&cfg);
    if (config_parse_text(&cfg, files[data[0] % 4], (const char *)data + 1, size - 1, &err) == 0)
        config_validate(&cfg, &err);
    config_free(&cfg);
    return 0;
}
