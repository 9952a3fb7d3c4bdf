# The fuzz build (TREESPEC_FUZZ=ON): every library is compiled with
# -fsanitize=fuzzer-no-link (coverage for libFuzzer) plus ASan and UBSan, and
# only what the targets in tests/fuzz link gets built (EXCLUDE_FROM_ALL), so
# that CI on two cores builds a few dozen files, not the whole tree.
include(${CMAKE_CURRENT_LIST_DIR}/clang_without_cuda.cmake)
treespec_require_clang_without_cuda(TREESPEC_FUZZ)
set(TREESPEC_SANITIZE address,undefined)
add_compile_options(-fsanitize=fuzzer-no-link,${TREESPEC_SANITIZE}
                    -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
add_link_options(-fsanitize=${TREESPEC_SANITIZE})

add_subdirectory(core EXCLUDE_FROM_ALL)
add_subdirectory(proto EXCLUDE_FROM_ALL)
add_subdirectory(tests/fuzz)
