# Unit tests: the tools file and running tool calls.
kimi_unit_test(test_tools SOURCES test_tools.c DEPS kimi_tools Threads::Threads)
