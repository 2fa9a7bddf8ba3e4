/* test_kv_cache: prefix matching (with the keep-one-token rule), the id bookkeeping, and the
 * context plan against numbers derived from the spec (docs/ARCHITECTURE.md: 70,272 B per
 * position for Kimi-K2.5), with the cache sharded over dcp ranks too. */
#include <stdlib.h>

#include "engine/backend/kv_shard.h"
#include "engine/model/weights.h"
#include "engine/runtime/kv_cache.h"
#include "tests/unit/check.h"

static void test_prefix(void)
{
    kv_cache c;
    kimi_err err = {0};
    CHECK_INT(kv_cache_init(&c, 8, &err), 0);
    int32_t first[5] = {10, 11, 12, 13, 14};
    CHECK_INT(kv_cache_reusable(&c, first, 5), 0);
    CHECK_INT(kv_cache_append(&c, first, 5, &err), 0);
    CHECK_INT(c.n, 5);

    int32_t longer[7] = {10, 11, 12, 13, 14, 15, 16};
    CHECK_INT(kv_cache_reusable(&c, longer, 7), 5);
    int32_t diverges[4] = {10, 11, 99, 13};
    CHECK_INT(kv_cache_reusable(&c, diverges, 4), 2);
    /* The whole prompt is cached: the last token is run again so its logits exist. */
    CHECK_INT(kv_cache_reusable(&c, first, 5), 4);
    int32_t shorter[3] = {10, 11, 12};
    CHECK_INT(kv_cache_reusable(&c, shorter, 3), 2);
    int32_t one[1] = {10};
    CHECK_INT(kv_cache_reusable(&c, one, 1), 0);
    int32_t other[2] = {7, 10};
    CHECK_INT(kv_cache_reusable(&c, other, 2), 0);

    kv_cache_truncate(&c, 2);
    CHECK_INT(c.n, 2);
    CHECK_INT(kv_cache_reusable(&c, longer, 7), 2);
    kv_cache_truncate(&c, 6);
    CHECK_INT(c.n, 2);
    CHECK_INT(kv_cache_append(&c, longer + 2, 5, &err), 0);
    CHECK_INT(kv_cache_reusable(&c, longer, 7), 6);

    CHECK_INT(kv_cache_append(&c, longer, 2, &err), KIMI_ERR_STATE);
    CHECK(strstr(err.msg, "context full") != NULL);
    CHECK_INT(c.n, 7);
    kv_cache_free(&c);
    CHECK_INT(kv_cache_init(&c, 0, &err), KIMI_ERR_USAGE);
}

/* Kimi-K2.5's text config as far as the plan reads it. */
static model_config kimi_config(void)
{
    model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.layers = 61;
    cfg.kv_lora_rank = 512;
    cfg.qk_rope_dim = 64;
    cfg.max_position = 262144;
    return cfg;
}

static void test_plan(void)
{
    model_config cfg = kimi_config();
    kimi_err err = {0};
    kv_cache_plan plan;
    const size_t per_token = 70272, gib = 1024ull * 1024 * 1024;
    size_t weights = 75 * gib;

    /* A rank budget that holds the rank's weights plus exactly 1000 positions. */
    size_t budget = weights + per_token * 1000;
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 8, 1, 0, "the test budget", &plan, &err), 0);
    CHECK_INT(plan.kv_bytes_per_token, per_token);
    CHECK_INT(plan.max_fit, 1000);
    CHECK_INT(plan.max_context, 1000);
    CHECK_MSG(strstr(plan.summary, "context 1000") && strstr(plan.summary, "the test budget"), "%s", plan.summary);

    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 8, 1, 800, "the test budget", &plan, &err), 0);
    CHECK_INT(plan.max_context, 800);
    CHECK(strstr(plan.summary, "(as asked; up to") != NULL);

    /* Exactly the memory fit is allowed; one position past it is not. */
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 8, 1, 1000, "the test budget", &plan, &err), 0);
    CHECK_INT(plan.max_context, 1000);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 8, 1, 1001, "the test budget", &plan, &err), KIMI_ERR_NOMEM);
    CHECK_MSG(strstr(err.msg, "1001") && strstr(err.msg, "at most 1000"), "%s", err.msg);

    /* One byte short of the 1000th position: 999 fit. */
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget - 1, 8, 1, 0, "the test budget", &plan, &err), 0);
    CHECK_INT(plan.max_fit, 999);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget - 1, 8, 1, 1000, "the test budget", &plan, &err),
              KIMI_ERR_NOMEM);

    /* Plenty of memory: the model's own limit caps the context. */
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, 2000 * gib, 1, 1, 0, "the test budget", &plan, &err), 0);
    CHECK_INT(plan.max_context, 262144);
    CHECK(strstr(plan.summary, "max_position_embeddings") != NULL);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, 2000 * gib, 1, 1, 300000, "the test budget", &plan, &err),
              KIMI_ERR_USAGE);
    CHECK(strstr(err.msg, "262144") != NULL);
    /* Exactly max_position_embeddings is allowed; one past it is not, with or without a budget. */
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, 2000 * gib, 1, 1, 262144, "the test budget", &plan, &err), 0);
    CHECK_INT(plan.max_context, 262144);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, 2000 * gib, 1, 1, 262145, "the test budget", &plan, &err),
              KIMI_ERR_USAGE);
    CHECK_MSG(strstr(err.msg, "262145") && strstr(err.msg, "262144"), "%s", err.msg);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, 0, 8, 1, 262144, "none", &plan, &err), 0);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, 0, 8, 1, 262145, "none", &plan, &err), KIMI_ERR_USAGE);

    /* A budget that holds exactly max_position_embeddings positions, and one more: both cap there. */
    size_t full = weights + per_token * 262144;
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, full, 8, 1, 0, "the test budget", &plan, &err), 0);
    CHECK_INT(plan.max_fit, 262144);
    CHECK_INT(plan.max_context, 262144);
    CHECK(strstr(plan.summary, "max_position_embeddings") != NULL);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, full + per_token, 8, 1, 0, "the test budget", &plan, &err), 0);
    CHECK_INT(plan.max_context, 262144);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, full - 1, 8, 1, 0, "the test budget", &plan, &err), 0);
    CHECK_INT(plan.max_context, 262143);
    CHECK(strstr(plan.summary, "what the memory budget holds") != NULL);

    /* The weights alone do not fit. */
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, 70 * gib, 8, 1, 0, "the test budget", &plan, &err), KIMI_ERR_NOMEM);
    CHECK(strstr(err.msg, "does not hold the weights") != NULL);

    /* No budget known (a GPU backend without a budget): only an explicit context works. */
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, 0, 8, 1, 0, "none", &plan, &err), KIMI_ERR_USAGE);
    CHECK(strstr(err.msg, "give a max context") != NULL);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, 0, 8, 1, 4096, "none", &plan, &err), 0);
    CHECK_INT(plan.max_context, 4096);
    CHECK_INT(plan.max_fit, -1);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, 0, 0, 1, 4096, "none", &plan, &err), KIMI_ERR_USAGE);
}

/* The fp8 cache (kernels/kv_format.h): 656 B per position and layer on Kimi, 61 layers = 40,016 B
 * per position instead of 70,272; the plan says which format is in use and what each holds. */
static void test_plan_fp8(void)
{
    model_config cfg = kimi_config();
    kimi_err err = {0};
    kv_cache_plan plan;
    const size_t fp16 = 70272, fp8 = 40016, gib = 1024ull * 1024 * 1024;
    size_t weights = 75 * gib, budget = weights + fp8 * 1000;
    CHECK_INT(kv_bytes_per_token(&cfg, KV_CACHE_FP8), fp8);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP8, weights, budget, 8, 1, 0, "the test budget", &plan, &err), 0);
    CHECK_INT(plan.format, KV_CACHE_FP8);
    CHECK_INT(plan.kv_bytes_per_token, fp8);
    CHECK_INT(plan.max_context, 1000);
    CHECK_INT(plan.max_fit_fp8, 1000);
    CHECK_INT(plan.max_fit_fp16, (long)(fp8 * 1000 / fp16));
    CHECK_MSG(strstr(plan.summary, "at 40016 B per position in the fp8 cache; an fp16 cache would hold 569"), "%s",
              plan.summary);
    /* the same budget with fp16: what fp8 would hold is said beside it */
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 8, 1, 0, "the test budget", &plan, &err), 0);
    CHECK_INT(plan.max_context, 569);
    CHECK_MSG(strstr(plan.summary, "in the fp16 cache; an fp8 cache would hold 1000"), "%s", plan.summary);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 8, 1, 570, "the test budget", &plan, &err),
              KIMI_ERR_NOMEM);
    CHECK_MSG(strstr(err.msg, "an fp8 cache would hold 1000"), "%s", err.msg);
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP8, weights, 0, 8, 1, 4096, "none", &plan, &err), 0);
    CHECK_MSG(strstr(plan.summary, "in the fp8 cache"), "%s", plan.summary);

    kv_cache_format f = KV_CACHE_FP16;
    CHECK(kv_cache_format_parse("fp8", &f) == 0 && f == KV_CACHE_FP8);
    CHECK(kv_cache_format_parse("fp16", &f) == 0 && f == KV_CACHE_FP16);
    CHECK(kv_cache_format_parse("bf16", &f) == -1 && f == KV_CACHE_FP16);
    CHECK(kv_cache_format_parse("FP8", &f) == -1);
}

/* Decode context parallelism: the same rank budget holds dcp times the context. */
static void test_plan_sharded(void)
{
    model_config cfg = kimi_config();
    kimi_err err = {0};
    kv_cache_plan plan;
    const size_t per_token = 70272, gib = 1024ull * 1024 * 1024;
    size_t weights = 75 * gib, budget = weights + per_token * 1000;
    for (int dcp = 1; dcp <= 8; dcp *= 2) {
        CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 8, dcp, 0, "the test budget", &plan, &err), 0);
        CHECK_INT(plan.max_fit, 1000L * dcp);
        CHECK_INT(plan.max_context, 1000L * dcp);
        CHECK_INT(plan.dcp, dcp);
        CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 8, dcp, 1000L * dcp, "the test budget", &plan, &err), 0);
        CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 8, dcp, 1000L * dcp + 1, "the test budget", &plan, &err),
                  KIMI_ERR_NOMEM);
        CHECK_MSG(strstr(err.msg, "at most") != NULL, "%s", err.msg);
    }
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 8, 8, 0, "the test budget", &plan, &err), 0);
    CHECK_MSG(strstr(plan.summary, "sharded over 8 ranks (dcp 8): 8784 B per position per rank"), "%s", plan.summary);
    /* dcp must divide tp */
    const int bad[] = {0, -1, 3, 16};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 8, bad[i], 0, "the test budget", &plan, &err),
                  KIMI_ERR_USAGE);
        CHECK_MSG(strstr(err.msg, "--dcp") != NULL, "%s", err.msg);
    }
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP16, weights, budget, 2, 4, 0, "the test budget", &plan, &err), KIMI_ERR_USAGE);
}

/* Both levers together: an fp8 cache sharded over dcp ranks stores 40,016 / dcp B per position per
 * rank, so the same rank budget holds dcp times the fp8 context, and the plan says both. */
static void test_plan_fp8_sharded(void)
{
    model_config cfg = kimi_config();
    kimi_err err = {0};
    kv_cache_plan plan;
    const size_t fp16 = 70272, fp8 = 40016, gib = 1024ull * 1024 * 1024;
    size_t weights = 75 * gib, budget = weights + fp8 * 1000;
    for (int dcp = 1; dcp <= 8; dcp *= 2) {
        CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP8, weights, budget, 8, dcp, 0, "the test budget", &plan, &err), 0);
        CHECK_INT(plan.format, KV_CACHE_FP8);
        CHECK_INT(plan.dcp, dcp);
        CHECK_INT(plan.max_fit_fp8, 1000L * dcp);
        CHECK_INT(plan.max_fit_fp16, (long)(fp8 * 1000 / fp16) * dcp);
        CHECK_INT(plan.max_context, 1000L * dcp);
        CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP8, weights, budget, 8, dcp, 1000L * dcp + 1, "the test budget",
                                        &plan, &err),
                  KIMI_ERR_NOMEM);
    }
    CHECK_INT(kv_cache_plan_context(&cfg, KV_CACHE_FP8, weights, budget, 8, 8, 0, "the test budget", &plan, &err), 0);
    CHECK_MSG(strstr(plan.summary, "at 40016 B per position in the fp8 cache, the cache sharded over 8 ranks (dcp 8): "
                                   "5002 B per position per rank; an fp16 cache would hold 4552"),
              "%s", plan.summary);
}

/* Round-robin sharding: every position has exactly one owner, slots are dense, and each member's
 * count of positions below n matches a direct count. */
static void test_shard_map(void)
{
    for (int dcp = 1; dcp <= 8; dcp++)
        for (long n = 0; n <= 40; n++) {
            long counted[8] = {0}, total = 0;
            for (long p = 0; p < n; p++) {
                int owner = kv_shard_owner(p, dcp);
                CHECK(owner >= 0 && owner < dcp);
                CHECK_INT(kv_shard_slot(p, dcp), counted[owner]);
                counted[owner]++;
            }
            for (int m = 0; m < dcp; m++) {
                CHECK_INT(kv_shard_local_count(n, dcp, m), counted[m]);
                CHECK(counted[m] <= kv_shard_slots(n, dcp));
                total += counted[m];
            }
            CHECK_INT(total, n);
            CHECK_INT(kv_shard_slots(n, dcp), counted[0]);
        }
    kimi_err err = {0};
    CHECK_INT(kv_shard_check(8, 4, &err), 0);
    CHECK_INT(kv_shard_check(6, 4, &err), KIMI_ERR_USAGE);
    CHECK_INT(kv_shard_context(1000, 8), 8000);
}

int main(void)
{
    test_prefix();
    test_plan();
    test_plan_fp8();
    test_plan_sharded();
    test_plan_fp8_sharded();
    test_shard_map();
    return check_finish();
}
