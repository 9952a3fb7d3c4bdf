# The fuzz build (TREESPEC_FUZZ=ON): every library is compiled with
# -fsanitize=fuzzer-no-link (coverage for libFuzzer) plus ASan and UBSan, and
# only what the targets in tests/fuzz link gets built (EXCLUDE_FROM_ALL), so
# that CI on two cores builds a few dozen files, not the whole tree.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "TREESPEC_FUZZ needs clang (CC=clang CXX=clang++), not "
                      "${CMAKE_CXX_COMPILER_ID}")
endif()
if(TREESPEC_CUDA)
  message(FATAL_ERROR "TREESPEC_FUZZ builds without CUDA; configure with -DTREESPEC_CUDA=OFF")
endif()
set(TREESPEC_SANITIZE address,undefined)
add_compile_options(-fsanitize=fuzzer-no-link,${TREESPEC_SANITIZE}
                    -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
add_link_options(-fsanitize=${TREESPEC_SANITIZE})

add_subdirectory(core EXCLUDE_FROM_ALL)
add_subdirectory(proto EXCLUDE_FROM_ALL)
add_subdirectory(tests/fuzz)
