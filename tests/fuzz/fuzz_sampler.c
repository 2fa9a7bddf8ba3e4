/* fuzz_sampler: a row of logits and sampling parameters straight from the bytes (raw float
 * bits, so NaN, infinities, subnormals and the range's ends come up): every parameter set
 * sampler_params_check accepts must give draws the rule of engine/runtime/sampler.h allows
 * (tests/unit/sampler_rule.h). Layout: temperature, top_p (float bits), top_k (int32), seed
 * (u64), then the logits, 4 bytes each (at most 512). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/runtime/sampler.h"
#include "tests/unit/sampler_rule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { header = 20, max_vocab = 512 };
    if (size < header + 4)
        return 0;
    sampler_params p;
    int32_t top_k;
    memcpy(&p.temperature, data, 4);
    memcpy(&p.top_p, data + 4, 4);
    memcpy(&top_k, data + 8, 4);
    memcpy(&p.seed, data + 12, 8);
    p.top_k = top_k;
    float logits[max_vocab];
    int vocab = (int)((size - header) / 4 < max_vocab ? (size - header) / 4 : max_vocab);
    memcpy(logits, data + header, (size_t)vocab * 4);

    sampler s;
    if (sampler_init(&s, vocab, &p, NULL))
        return 0;
    /* A draw the rule forbids crashes the target, which is how libFuzzer learns of it. */
    for (int i = 0; i < 4; i++)
        if (sampler_rule_violation(logits, vocab, &p, sampler_sample(&s, logits)))
            __builtin_trap();
    sampler_free(&s);
    return 0;
}
