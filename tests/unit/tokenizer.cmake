# Unit tests: tokenizer.
kimi_unit_test(test_tokenizer SOURCES test_tokenizer.c DEPS kimi_tokenizer kimi_config PkgConfig::JANSSON)
kimi_unit_test(test_utf8 SOURCES test_utf8.c DEPS kimi_utf8)
