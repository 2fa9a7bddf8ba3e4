# Unit tests: engine.
kimi_unit_test(test_sampler SOURCES test_sampler.c DEPS kimi_sampler m)
kimi_unit_test(test_kv_cache SOURCES test_kv_cache.c DEPS kimi_kv_cache)
kimi_unit_test(test_engine SOURCES test_engine.c DEPS kimi_engine PkgConfig::JANSSON m)
if(KIMI_HAVE_CUDA)
  # The same engine tests on the CUDA backend (TP 1, 2, 8 on one device): gpu label, skipped
  # (exit 77) without a device.
  add_test(NAME test_engine_cuda COMMAND test_engine cuda WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_engine_cuda PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
endif()
# Greedy ids, prefix reuse and cancel with the KV cache sharded over 2 and 8 ranks (--dcp).
foreach(dcp 2 8)
  add_test(NAME test_engine_dcp${dcp} COMMAND test_engine dcp ${dcp} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_engine_dcp${dcp} PROPERTIES LABELS unit)
endforeach()
kimi_unit_test(test_verify SOURCES test_verify.c DEPS kimi_verify kimi_kernels_cpu m)
kimi_unit_test(test_speculate SOURCES test_speculate.c DEPS kimi_speculate kimi_sampler m)
kimi_unit_test(test_engine_speculate SOURCES test_engine_speculate.c DEPS kimi_engine kimi_tokenizer m)
# the same on the fp8 latent cache (issue 22): prefix reuse, cancel and speculation rollback
add_test(NAME test_engine_speculate_fp8 COMMAND test_engine_speculate fp8 WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_engine_speculate_fp8 PROPERTIES LABELS unit)
# The same with the KV cache sharded over every rank (--dcp = tp): rollback of rejected drafts,
# prefix reuse and cancel across the shards.
add_test(NAME test_engine_speculate_dcp COMMAND test_engine_speculate dcp WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_engine_speculate_dcp PROPERTIES LABELS unit)
if(KIMI_HAVE_CUDA)
  # Speculation on the CUDA backend (its verify step), fp16 and fp8 cache: gpu label, skipped
  # (exit 77) without a device.
  add_test(NAME test_engine_speculate_cuda COMMAND test_engine_speculate cuda WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  add_test(NAME test_engine_speculate_cuda_fp8 COMMAND test_engine_speculate cuda fp8
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_engine_speculate_cuda test_engine_speculate_cuda_fp8 PROPERTIES LABELS gpu
                       SKIP_RETURN_CODE 77)
endif()
# Both: the fp8 latent cache sharded over every rank.
add_test(NAME test_engine_speculate_dcp_fp8 COMMAND test_engine_speculate dcp fp8 WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_engine_speculate_dcp_fp8 PROPERTIES LABELS unit)
