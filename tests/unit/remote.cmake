# Unit tests: the remote generator (SSE framing, OpenAI stream chunks, request, and the
# generator against tests/remote/server.py on 127.0.0.1).
kimi_unit_test(test_sse SOURCES test_sse.c DEPS kimi_sse kimi_file_io)
kimi_unit_test(test_openai_stream SOURCES test_openai_stream.c DEPS kimi_openai_stream kimi_sse kimi_file_io)
kimi_unit_test(test_openai_request SOURCES test_openai_request.c DEPS kimi_openai_request kimi_chat)
kimi_unit_test(test_generator_remote SOURCES test_generator_remote.c
  DEPS kimi_generator_remote kimi_file_io PkgConfig::CURL)
set_tests_properties(test_generator_remote PROPERTIES TIMEOUT 120)
