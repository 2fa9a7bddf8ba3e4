# kimi_module(NAME SOURCES a.c b.c DEPS x y): one static library per module, so that a
# module's tests build and link against exactly what it uses.
set(KIMI_WARNINGS -Wall -Wextra -Werror)
set(KIMI_C_FLAGS ${KIMI_WARNINGS} -D_GNU_SOURCE)
if(KIMI_SANITIZE)
  list(APPEND KIMI_C_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=address,undefined)
endif()
if(KIMI_FUZZ)
  list(APPEND KIMI_C_FLAGS -fsanitize=fuzzer-no-link,address,undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

function(kimi_module name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${M_SOURCES})
  target_compile_options(${name} PRIVATE ${KIMI_C_FLAGS})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${M_DEPS})
endfunction()

# kimi_exe(NAME SOURCES ... DEPS ...): an executable built with the project's flags.
function(kimi_exe name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${M_SOURCES})
  target_compile_options(${name} PRIVATE ${KIMI_C_FLAGS})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${M_DEPS})
endfunction()

# kimi_unit_test(NAME SOURCES ... DEPS ... [LABELS ...]): a unit test executable run by ctest
# from the repository root (so tests/golden paths resolve).
function(kimi_unit_test name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  kimi_exe(${name} SOURCES ${M_SOURCES} DEPS ${M_DEPS})
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  if(M_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${M_LABELS}")
  else()
    set_tests_properties(${name} PROPERTIES LABELS unit)
  endif()
endfunction()
