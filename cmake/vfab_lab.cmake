# Lab tests: GoogleTest binaries that run inside the QEMU guest (scripts/lab), against real
# VFIO. vfab_add_lab_test(target) registers one; vfab_lab_finalize() then adds one ctest
# test per kernel flavor that boots the guest once and runs all of them (label "lab").

function(vfab_add_lab_test target)
  set_property(GLOBAL APPEND PROPERTY VFAB_LAB_TARGETS ${target})
endfunction()

function(vfab_lab_finalize)
  if(NOT VFAB_LAB_TESTS)
    return()
  endif()
  get_property(targets GLOBAL PROPERTY VFAB_LAB_TARGETS)
  set(bins)
  foreach(t IN LISTS targets)
    list(APPEND bins $<TARGET_FILE:${t}>)
  endforeach()
  foreach(flavor IN LISTS VFAB_LAB_FLAVORS)
    add_test(NAME lab.${flavor}
             COMMAND ${PROJECT_SOURCE_DIR}/scripts/lab --kernel ${flavor} --timeout 900 run ${bins})
    # The first iommufd run builds its kernel (~10 min on 2 cores); boots share the 2 cores.
    set_tests_properties(lab.${flavor} PROPERTIES LABELS lab TIMEOUT 2400 RUN_SERIAL TRUE)
  endforeach()
endfunction()
