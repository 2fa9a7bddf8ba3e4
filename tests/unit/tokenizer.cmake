# Unit tests: tokenizer.
kimi_unit_test(test_tokenizer SOURCES test_tokenizer.c DEPS kimi_tokenizer kimi_config PkgConfig::JANSSON)
