# The sanitizer and fuzz builds (cmake/sanitize.cmake, cmake/fuzz.cmake) need
# Debian's clang and build no CUDA; `option` names the one that asked.
function(treespec_require_clang_without_cuda option)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "${option} needs clang (CC=clang CXX=clang++), not "
                        "${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(TREESPEC_CUDA)
    message(FATAL_ERROR "${option} builds without CUDA; configure with -DTREESPEC_CUDA=OFF")
  endif()
endfunction()
