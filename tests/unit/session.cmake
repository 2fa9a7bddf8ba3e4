# Unit tests: session (app/chat/session.c).
kimi_unit_test(test_session SOURCES test_session.c DEPS kimi_session kimi_config kimi_tokenizer kimi_file_io)
# The exported messages rendered by the checkpoint's chat_template.jinja (python3-jinja2) give
# chat_render's text.
kimi_exe(session_render_dump SOURCES session_render_dump.c DEPS kimi_session)
add_test(NAME session_template_check
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/session_template_check.py $<TARGET_FILE:session_render_dump>
          ${CMAKE_CURRENT_BINARY_DIR}/session_template_check)
set_tests_properties(session_template_check PROPERTIES LABELS unit)
# session_save under SIGKILL at random moments: the file is always one whole session.
kimi_exe(session_durability_writer SOURCES session_durability_writer.c DEPS kimi_session)
kimi_exe(test_session_durability SOURCES test_session_durability.c DEPS kimi_session)
add_test(NAME test_session_durability COMMAND test_session_durability $<TARGET_FILE:session_durability_writer>)
set_tests_properties(test_session_durability PROPERTIES LABELS unit TIMEOUT 120)
# The durability protocol of atomic saves (sessions, JSON and Markdown exports): fsync and
# rename wrapped at link time, their count and order checked, failures injected at each step.
kimi_unit_test(test_session_atomic SOURCES test_session_atomic.c DEPS kimi_session)
target_link_options(test_session_atomic PRIVATE -Wl,--wrap=fsync -Wl,--wrap=rename)
# The same tests under a locale with a decimal comma.
add_test(NAME test_session_locale
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/session_locale.sh $<TARGET_FILE:test_session>
          ${CMAKE_CURRENT_BINARY_DIR}/session_locale
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_session_locale PROPERTIES LABELS unit)
