# Sanitizer builds (TREESPEC_SANITIZE; tools/sanitize.sh configures them):
#
#   address,undefined  build-asan/: every library, service binary, unit,
#                      golden and integration test, compiled with ASan +
#                      UBSan; UB aborts (-fno-sanitize-recover).
#   thread             build-tsan/: the same tree with TSan; tools/sanitize.sh
#                      builds and runs only the lane, step machine,
#                      coordinator and communicator tests (TREESPEC_TEST_ONLY).
#
# Debian's clang, as for the fuzz build: gcc's sanitizers would do, but one
# compiler for both keeps the runtime and the suppression syntax the same.
# -O1 and line tables only: the usual sanitizer setting, faster to compile
# than RelWithDebInfo's -O2 -g and fast enough to run (README, "Sanitizers").
# No CUDA and no benchmarks (tools/bench measures speed, which a sanitizer
# build cannot).
include(${CMAKE_CURRENT_LIST_DIR}/clang_without_cuda.cmake)
treespec_require_clang_without_cuda(TREESPEC_SANITIZE)
if(TREESPEC_FUZZ)
  message(FATAL_ERROR "TREESPEC_SANITIZE and TREESPEC_FUZZ are separate build dirs")
endif()
if(TREESPEC_SANITIZE STREQUAL "address,undefined")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(TREESPEC_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread)
  add_link_options(-fsanitize=thread)
  # Debian's abseil is not built with TSan: every executable gets the
  # annotated absl::Mutex / CondVar / Notification entry points of
  # tools/sanitizers/tsan_absl_sync.cc (the file says why and how), exported
  # so that they interpose the library's.
  add_library(treespec_tsan_absl_sync OBJECT
              ${PROJECT_SOURCE_DIR}/tools/sanitizers/tsan_absl_sync.cc)
  target_link_libraries(treespec_tsan_absl_sync PUBLIC absl::synchronization ${CMAKE_DL_LIBS})
  link_libraries($<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:treespec_tsan_absl_sync>)
  set(CMAKE_ENABLE_EXPORTS ON)
else()
  message(FATAL_ERROR "TREESPEC_SANITIZE is 'address,undefined' or 'thread', not "
                      "'${TREESPEC_SANITIZE}'")
endif()
add_compile_options(-fno-omit-frame-pointer)
add_compile_definitions(TREESPEC_SANITIZER_BUILD=1)
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only -DNDEBUG" CACHE STRING "" FORCE)
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only -DNDEBUG" CACHE STRING "" FORCE)
set(TREESPEC_BENCH OFF CACHE BOOL "" FORCE)
