# Unit tests: loader.
kimi_unit_test(test_safetensors SOURCES test_safetensors.c DEPS kimi_safetensors PkgConfig::JANSSON)
kimi_unit_test(test_config SOURCES test_config.c DEPS kimi_config kimi_weights)
kimi_unit_test(test_weights SOURCES test_weights.c DEPS kimi_weights)
kimi_unit_test(test_loader_bad SOURCES test_loader_bad.c DEPS kimi_weights PkgConfig::JANSSON)
# Checkpoints of other shapes and recipes, written by kimi-mkmodel (tests/bench).
kimi_exe(test_loader_variants SOURCES test_loader_variants.c DEPS kimi_weights PkgConfig::JANSSON)
add_test(NAME test_loader_variants COMMAND test_loader_variants $<TARGET_FILE:kimi-mkmodel>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_loader_variants PROPERTIES LABELS unit)
# kimi-probe info / weights: issue 2's numbers on tiny-k25, exit codes and messages on bad input.
add_test(NAME test_probe_loader COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_probe_loader.sh $<TARGET_FILE:kimi-probe>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_probe_loader PROPERTIES LABELS unit)
# kimi-probe plan over described devices (tiny-k25), and Kimi-K2.5's plan (a --holes checkpoint of
# its shapes) against figures by hand and the README's table.
add_test(NAME test_probe_plan COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_probe_plan.sh rules $<TARGET_FILE:kimi-probe>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_probe_plan PROPERTIES LABELS unit)
add_test(NAME test_probe_plan_k25 COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_probe_plan.sh k25 $<TARGET_FILE:kimi-probe>
         $<TARGET_FILE:kimi-mkmodel> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_probe_plan_k25 PROPERTIES LABELS unit TIMEOUT 900)
