# Unit tests: chat.
kimi_unit_test(test_chat SOURCES test_chat.c DEPS kimi_chat kimi_config kimi_tokenizer)
kimi_unit_test(test_parse SOURCES test_parse.c DEPS kimi_parse kimi_chat kimi_config kimi_tokenizer)
kimi_unit_test(test_array SOURCES test_array.c DEPS kimi_array)
