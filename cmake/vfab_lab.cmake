# Lab tests: GoogleTest binaries that run inside the QEMU guest (scripts/lab), against real
# VFIO. vfab_add_lab_test(target [SUITES suite...]) registers one; vfab_lab_finalize() then
# adds one ctest test per suite that boots the guest once and runs all of that suite's
# binaries (label "lab"). Suites:
#   debian            Debian's kernel, IOMMU on (legacy VFIO container/group)
#   iommufd           the iommufd lab kernel, IOMMU on (iommufd + VFIO cdev, and legacy)
#   iommufd-noiommu   the iommufd lab kernel booted without the IOMMU, VFIO no-IOMMU mode
# Default: debian and iommufd.
set(VFAB_LAB_SUITES "debian;iommufd;iommufd-noiommu" CACHE STRING "Lab suites ctest runs")

function(vfab_add_lab_test target)
  cmake_parse_arguments(arg "" "" "SUITES;EXTRA" ${ARGN})
  if(NOT arg_SUITES)
    set(arg_SUITES debian iommufd)
  endif()
  foreach(suite IN LISTS arg_SUITES)
    set_property(GLOBAL APPEND PROPERTY VFAB_LAB_SUITE_${suite} ${target})
    # EXTRA targets (tools a test runs) are copied into the guest, not run.
    set_property(GLOBAL APPEND PROPERTY VFAB_LAB_EXTRA_${suite} ${arg_EXTRA})
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
    set(opts --kernel ${flavor} --timeout 900)
    if(suite MATCHES "-noiommu$")
      list(APPEND opts --no-iommu)
    endif()
    get_property(extras GLOBAL PROPERTY VFAB_LAB_EXTRA_${suite})
    if(extras)
      list(REMOVE_DUPLICATES extras)
    endif()
    foreach(x IN LISTS extras)
      list(APPEND opts --extra $<TARGET_FILE:${x}>)
    endforeach()
    add_test(NAME lab.${suite} COMMAND ${PROJECT_SOURCE_DIR}/scripts/lab ${opts} run ${bins})
    # The first iommufd run may build its kernel (~10 min on 2 cores); boots share the cores.
    set_tests_properties(lab.${suite} PROPERTIES LABELS lab TIMEOUT 2400 RUN_SERIAL TRUE)
  endforeach()
endfunction()
