# Unit tests: session (app/session.c).
kimi_unit_test(test_session SOURCES test_session.c DEPS kimi_session kimi_config kimi_tokenizer kimi_file_io)
# The exported messages rendered by the checkpoint's chat_template.jinja (python3-jinja2) give
# chat_render's text.
kimi_exe(session_render_dump SOURCES session_render_dump.c DEPS kimi_session)
add_test(NAME session_template_check
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/session_template_check.py $<TARGET_FILE:session_render_dump>
          ${CMAKE_CURRENT_BINARY_DIR}/session_template_check)
set_tests_properties(session_template_check PROPERTIES LABELS unit)
