# Unit tests: engine.
kimi_unit_test(test_sampler SOURCES test_sampler.c DEPS kimi_sampler m)
kimi_unit_test(test_kv_cache SOURCES test_kv_cache.c DEPS kimi_kv_cache)
kimi_unit_test(test_engine SOURCES test_engine.c DEPS kimi_engine PkgConfig::JANSSON m)
