# Lab tests: GoogleTest binaries that run inside the QEMU guest (scripts/lab), against real
# VFIO. vfab_add_lab_test(target [SUITES suite...] [EXTRA target-or-file...] [FIXTURES name...]
# [DPDK] [PYVERBS]) registers one (FIXTURES: ctest fixtures whose set-up test makes an EXTRA file);
# vfab_lab_finalize() then adds one ctest test per suite that boots the guest once and runs
# all of that suite's binaries (label "lab"). DPDK: the test needs DPDK in the guest, so that
# suite's boot gets scripts/lab --dpdk (dpdk-testpmd, its PMDs and /vfab/bin/dpdk-pps). PYVERBS:
# the test needs Python and python3-pyverbs with rdma-core's test suite (scripts/lab --pyverbs). Suites:
#   debian            Debian's kernel, IOMMU on (legacy VFIO container/group)
#   iommufd           the iommufd lab kernel, IOMMU on (iommufd + VFIO cdev, and legacy)
#   iommufd-noiommu   the iommufd lab kernel booted without the IOMMU, VFIO no-IOMMU mode
# Default: debian and iommufd.
set(VFAB_LAB_SUITES "debian;iommufd;iommufd-noiommu" CACHE STRING "Lab suites ctest runs")

function(vfab_add_lab_test target)
  cmake_parse_arguments(arg "DPDK;PYVERBS" "" "SUITES;EXTRA;FIXTURES" ${ARGN})
  if(NOT arg_SUITES)
    set(arg_SUITES debian iommufd)
  endif()
  foreach(suite IN LISTS arg_SUITES)
    set_property(GLOBAL APPEND PROPERTY VFAB_LAB_SUITE_${suite} ${target})
    # EXTRA targets (tools a test runs) are copied into the guest, not run.
    set_property(GLOBAL APPEND PROPERTY VFAB_LAB_EXTRA_${suite} ${arg_EXTRA})
    set_property(GLOBAL APPEND PROPERTY VFAB_LAB_FIXTURES_${suite} ${arg_FIXTURES})
    if(arg_DPDK)
      set_property(GLOBAL PROPERTY VFAB_LAB_DPDK_${suite} ON)
    endif()
    if(arg_PYVERBS)
      set_property(GLOBAL PROPERTY VFAB_LAB_PYVERBS_${suite} ON)
    endif()
  endforeach()
endfunction()

function(vfab_lab_finalize)
  if(NOT VFAB_LAB_TESTS)
    return()
  endif()
  foreach(suite IN LISTS VFAB_LAB_SUITES)
    get_property(targets GLOBAL PROPERTY VFAB_LAB_SUITE_${suite})
    if(NOT targets)
      continue()
    endif()
    set(bins)
    foreach(t IN LISTS targets)
      list(APPEND bins $<TARGET_FILE:${t}>)
    endforeach()
    string(REPLACE "-noiommu" "" flavor ${suite})
    set(opts --kernel ${flavor} --timeout 1200)   # the iommufd suite takes about 11 min in CI
    if(suite MATCHES "-noiommu$")
      list(APPEND opts --no-iommu)
    endif()
    get_property(extras GLOBAL PROPERTY VFAB_LAB_EXTRA_${suite})
    if(extras)
      list(REMOVE_DUPLICATES extras)
    endif()
    foreach(x IN LISTS extras)
      if(TARGET ${x})
        list(APPEND opts --extra $<TARGET_FILE:${x}>)
      else()
        list(APPEND opts --extra ${x})   # a file a fixture's set-up test makes
      endif()
    endforeach()
    get_property(dpdk GLOBAL PROPERTY VFAB_LAB_DPDK_${suite})
    if(dpdk)
      list(APPEND opts --dpdk)
    endif()
    get_property(pyverbs GLOBAL PROPERTY VFAB_LAB_PYVERBS_${suite})
    if(pyverbs)
      list(APPEND opts --pyverbs)
    endif()
    add_test(NAME lab.${suite} COMMAND ${PROJECT_SOURCE_DIR}/scripts/lab.d/ctest-run ${opts} run ${bins})
    # The first iommufd run may build its kernel (~10 min on 2 cores); boots share the cores.
    set_tests_properties(lab.${suite} PROPERTIES LABELS lab TIMEOUT 2400 RUN_SERIAL TRUE)
    get_property(fixtures GLOBAL PROPERTY VFAB_LAB_FIXTURES_${suite})
    if(fixtures)
      list(REMOVE_DUPLICATES fixtures)
      set_tests_properties(lab.${suite} PROPERTIES FIXTURES_REQUIRED "${fixtures}")
    endif()
  endforeach()
endfunction()
