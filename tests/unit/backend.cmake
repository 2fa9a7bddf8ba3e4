# Unit tests: backend.
kimi_unit_test(test_backend SOURCES test_backend.c DEPS kimi_backend m)
kimi_unit_test(test_device_plan SOURCES test_device_plan.c DEPS kimi_device_plan kimi_backend kimi_kernels_cpu m)
if(KIMI_HAVE_CUDA)
  kimi_unit_test(test_cuda_comm SOURCES test_cuda_comm.c DEPS kimi_backend CUDA::cudart)
endif()
