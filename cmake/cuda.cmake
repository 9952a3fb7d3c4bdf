# CUDA toolchain setup (see ../shared/TOOLCHAIN.md pitfalls 1, 2 and 8).
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  # sm_80 and sm_90 machine code plus PTX for newer GPUs.
  set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
endif()
if(NOT DEFINED CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_COMPILER ${TREESPEC_NVCC})
endif()
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
enable_language(CUDA)
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
find_package(CUDAToolkit REQUIRED)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
add_library(NCCL::nccl SHARED IMPORTED)
set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                      INTERFACE_INCLUDE_DIRECTORIES ${TREESPEC_NCCL_H})
