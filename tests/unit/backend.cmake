# Unit tests: backend.
kimi_unit_test(test_backend SOURCES test_backend.c DEPS kimi_backend m)
kimi_unit_test(test_backend_dcp SOURCES test_backend_dcp.c DEPS kimi_backend kimi_kernels_cpu Threads::Threads m)
kimi_unit_test(test_device_plan SOURCES test_device_plan.c DEPS kimi_device_plan kimi_backend kimi_kernels_cpu m)
if(KIMI_HAVE_CUDA)
  kimi_unit_test(test_cuda_comm SOURCES test_cuda_comm.c DEPS kimi_backend CUDA::cudart Threads::Threads)
  if(NOT KIMI_HAVE_NCCL)
    target_compile_definitions(test_cuda_comm PRIVATE KIMI_TEST_NO_NCCL=1)
  endif()
  # The same checks against a communicator compiled without NCCL, whatever this build links.
  kimi_unit_test(test_cuda_comm_no_nccl SOURCES test_cuda_comm.c ${CMAKE_SOURCE_DIR}/engine/backend/cuda_comm.c
    ${CMAKE_SOURCE_DIR}/engine/backend/cuda_peer.c
    DEPS kimi_error kimi_monotonic kimi_kernels_cuda CUDA::cudart Threads::Threads)
  target_compile_definitions(test_cuda_comm_no_nccl PRIVATE KIMI_TEST_NO_NCCL=1)
endif()
kimi_unit_test(test_cpu_count SOURCES test_cpu_count.c DEPS kimi_cpu_count)
kimi_unit_test(test_monotonic SOURCES test_monotonic.c DEPS kimi_monotonic)
# one CPU in the affinity mask is one usable CPU (the oversubscribed case of issue 17)
add_test(NAME test_cpu_count_one_cpu COMMAND taskset -c 0 $<TARGET_FILE:test_cpu_count> 1)
set_tests_properties(test_cpu_count_one_cpu PROPERTIES LABELS unit)
kimi_unit_test(test_cpu_profile SOURCES test_cpu_profile.c DEPS kimi_backend m)
