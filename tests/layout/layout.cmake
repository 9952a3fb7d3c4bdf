# Checks that keep the layout of the tree (issue 10, point 5):
#
# 1. At configure time: treespec_spec, and every test that includes only
#    core/spec and core/util headers, reach neither ICU, Gloo, NCCL, CUDA nor
#    gRPC through their link closure (direct and transitive
#    target_link_libraries). A violation is a
#    configure error naming the chain that brings the library in.
# 2. As a test (label `unit`): nothing under core/ includes a kernels/ header;
#    kernels depend on core, never the reverse.

# Appends to `chain_out` the first path from `target` to one of `forbidden`.
function(treespec_find_forbidden target forbidden path chain_out)
  if(TARGET ${target})
    get_target_property(aliased ${target} ALIASED_TARGET)
    if(aliased)
      set(target ${aliased})
    endif()
  endif()
  list(FIND forbidden ${target} hit)
  if(NOT hit EQUAL -1)
    set(${chain_out} "${path} -> ${target}" PARENT_SCOPE)
    return()
  endif()
  if(NOT TARGET ${target})
    return()
  endif()
  get_property(seen GLOBAL PROPERTY TREESPEC_LAYOUT_SEEN)
  list(FIND seen ${target} was_seen)
  if(NOT was_seen EQUAL -1)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY TREESPEC_LAYOUT_SEEN ${target})
  get_target_property(type ${target} TYPE)
  set(deps "")
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(direct ${target} LINK_LIBRARIES)
    if(direct)
      list(APPEND deps ${direct})
    endif()
  endif()
  get_target_property(iface ${target} INTERFACE_LINK_LIBRARIES)
  if(iface)
    list(APPEND deps ${iface})
  endif()
  foreach(dep ${deps})
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" dep "${dep}")
    if(dep MATCHES "^\\$<" OR dep MATCHES "^-")
      continue()
    endif()
    treespec_find_forbidden(${dep} "${forbidden}" "${path} -> ${target}" chain)
    if(chain)
      set(${chain_out} "${chain}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

function(treespec_check_links target)
  set(forbidden gloo PkgConfig::ICU NCCL::nccl CUDA::cudart CUDA::cublas gRPC::grpc++
      treespec_tokenizer treespec_comm_gloo treespec_rpc)
  set_property(GLOBAL PROPERTY TREESPEC_LAYOUT_SEEN "")
  set(chain "")
  treespec_find_forbidden(${target} "${forbidden}" "" chain)
  if(chain)
    message(FATAL_ERROR "layout: ${target} links a library it must not:${chain}")
  endif()
endfunction()

treespec_check_links(treespec_spec)
# Every test that includes only core/spec, core/util (and test helpers) headers.
get_property(pure_tests GLOBAL PROPERTY TREESPEC_PURE_TESTS)
foreach(test token_tree_test verify_test bandit_test)
  list(FIND pure_tests ${test} found)
  if(found EQUAL -1)
    message(FATAL_ERROR "layout: ${test} should include only core/spec and core/util headers")
  endif()
endforeach()
foreach(test ${pure_tests})
  treespec_check_links(${test})
endforeach()
list(LENGTH pure_tests num_pure_tests)
message(STATUS "layout: ${num_pure_tests} core/spec tests link neither ICU, Gloo, NCCL, CUDA nor gRPC")

add_test(NAME Layout.CoreIncludesNoKernelsHeader
         COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR}
                 -P ${CMAKE_CURRENT_LIST_DIR}/core_includes_check.cmake)
set_tests_properties(Layout.CoreIncludesNoKernelsHeader PROPERTIES LABELS unit)
