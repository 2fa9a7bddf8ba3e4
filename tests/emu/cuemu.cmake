# The CPU emulation of CUDA (tests/emu; the 'cuemu' preset, KIMI_CUDA_EMU=ON): a runtime
# library that stands in for CUDA::cudart, CUDA::cublasLt and NCCL, and
# kimi_cuemu_kernels(target sources...), which translates kernels/cuda/*.cu mechanically
# (tests/emu/translate.py) and compiles them as C++17 without contraction, as the device build
# (--fmad=false). Nothing of it is installed or linked into a build with the real toolkit.
enable_language(CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
find_package(Python3 REQUIRED COMPONENTS Interpreter)
find_package(Threads REQUIRED)
set(KIMI_EMU_DIR ${CMAKE_SOURCE_DIR}/tests/emu)
add_library(kimi_cuemu STATIC ${KIMI_EMU_DIR}/runtime.cpp ${KIMI_EMU_DIR}/fiber.cpp ${KIMI_EMU_DIR}/nccl.cpp
            ${KIMI_EMU_DIR}/cublaslt.cpp)
target_include_directories(kimi_cuemu PUBLIC ${KIMI_EMU_DIR}/include PRIVATE ${KIMI_EMU_DIR})
target_compile_options(kimi_cuemu PRIVATE -Wall -Wextra -Werror -ffp-contract=off)
target_link_libraries(kimi_cuemu PUBLIC Threads::Threads)
add_library(CUDA::cudart ALIAS kimi_cuemu)
add_library(CUDA::cublasLt ALIAS kimi_cuemu)
set(KIMI_NCCL_INCLUDE_DIR ${KIMI_EMU_DIR}/include)

# kimi_cuemu_translate(out sources...): the translated C++ of each .cu (relative to the current
# source directory), listed in out.
function(kimi_cuemu_translate out)
  set(outputs)
  foreach(source ${ARGN})
    get_filename_component(name ${source} NAME)
    file(RELATIVE_PATH relative ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/${source})
    set(output ${CMAKE_CURRENT_BINARY_DIR}/cuemu/${name}.cpp)
    add_custom_command(OUTPUT ${output}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/cuemu
      COMMAND ${Python3_EXECUTABLE} ${KIMI_EMU_DIR}/translate.py ${CMAKE_CURRENT_SOURCE_DIR}/${source} ${output}
              ${relative}
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${source} ${KIMI_EMU_DIR}/translate.py
      COMMENT "cuemu: translating ${relative}")
    list(APPEND outputs ${output})
  endforeach()
  set(${out} ${outputs} PARENT_SCOPE)
endfunction()

# fmaf, one instruction on the device, is a call into libm for g++ without -mfma (a fifth of the
# CPU time of the attention kernels' tests); with -mfma it is the instruction, the same single
# rounding. Only where the build machine has FMA: the emulated tests run where they are built.
include(CheckCXXSourceRuns)
check_cxx_source_runs("int main() { return __builtin_cpu_supports(\"fma\") ? 0 : 1; }" KIMI_EMU_HOST_FMA)

# The compile options of translated CUDA: nvcc does not warn on sign comparisons in device code;
# g++ does, and knows no #pragma unroll.
function(kimi_cuemu_options target)
  target_include_directories(${target} PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(${target} PUBLIC kimi_cuemu)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror -Wno-sign-compare -Wno-unknown-pragmas
                         -ffp-contract=off)
  if(KIMI_EMU_HOST_FMA)
    target_compile_options(${target} PRIVATE -mfma)
  endif()
  target_compile_definitions(${target} PRIVATE __CUDACC__ _GNU_SOURCE)
endfunction()

function(kimi_cuemu_kernels target)
  kimi_cuemu_translate(outputs ${ARGN})
  add_library(${target} STATIC ${outputs})
  kimi_cuemu_options(${target})
endfunction()
