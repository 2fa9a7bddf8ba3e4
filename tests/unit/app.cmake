# Unit tests: the app modules (paths, options, script).
kimi_unit_test(test_paths SOURCES test_paths.c DEPS kimi_paths)
# paths.c again, with an install prefix and a source tree the test creates and removes.
kimi_unit_test(test_paths_lookup SOURCES test_paths_lookup.c ${CMAKE_SOURCE_DIR}/app/chat/paths.c DEPS kimi_error)
target_compile_definitions(test_paths_lookup PRIVATE
  TEST_ROOT="${CMAKE_CURRENT_BINARY_DIR}/test_paths_lookup.d"
  KIMI_INSTALL_DATADIR="${CMAKE_CURRENT_BINARY_DIR}/test_paths_lookup.d/install"
  KIMI_SOURCE_DIR="${CMAKE_CURRENT_BINARY_DIR}/test_paths_lookup.d/source")
kimi_unit_test(test_script SOURCES test_script.c DEPS kimi_script)
# /expect matches against a 1 MB answer: a second or so; quadratic matching took minutes
add_test(NAME test_script_big_answer COMMAND test_script --big-answer)
set_tests_properties(test_script_big_answer PROPERTIES LABELS unit TIMEOUT 30)
kimi_unit_test(test_options SOURCES test_options.c DEPS kimi_options kimi_commands)
# The man page renders without warnings with groff and man (groff-base and man-db, installed by
# tests/install-deps.sh). Always registered: a machine without them fails the test, saying so.
add_test(NAME test_man_page COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_man_page.sh ${CMAKE_SOURCE_DIR}/app/kimi-chat.1)
set_tests_properties(test_man_page PROPERTIES LABELS unit)
kimi_unit_test(test_commands SOURCES test_commands.c DEPS kimi_commands)
kimi_unit_test(test_completion SOURCES test_completion.c DEPS kimi_completion)
kimi_unit_test(test_app SOURCES test_app.c DEPS kimi_app)
kimi_unit_test(test_storage_read SOURCES test_storage_read.c DEPS kimi_storage_read)
add_test(NAME test_probe_load COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_probe_load.sh $<TARGET_FILE:kimi-probe>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_probe_load PROPERTIES LABELS unit)
# The dependency direction of the tree, and that the check finds a planted upward include.
add_test(NAME test_layering COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_layering.sh ${CMAKE_SOURCE_DIR})
add_test(NAME test_layering_self COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_layering.sh --self-test)
set_tests_properties(test_layering test_layering_self PROPERTIES LABELS unit)
# Whatever kimi-chat writes, it reads: random sessions made through the chat core (issue 18).
kimi_unit_test(test_session_property SOURCES test_session_property.c DEPS kimi_app kimi_file_io)
