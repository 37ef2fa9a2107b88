# The API reference (docs/reference): `cmake --build <dir> --target doc` runs Doxygen over
# include/vfab into <dir>/doc (HTML, man pages), installed with the development files when built.
# `doc_undocumented` lists the public functions without documentation (docs/reference/undocumented.sh);
# the test unit.api_reference fails on any (docs/reference/check.sh).
configure_file(${PROJECT_SOURCE_DIR}/docs/reference/Doxyfile.in ${PROJECT_BINARY_DIR}/Doxyfile @ONLY)
if(VFAB_TESTS)
  add_test(NAME unit.api_reference
           COMMAND ${PROJECT_SOURCE_DIR}/docs/reference/check.sh ${PROJECT_BINARY_DIR}/Doxyfile ${PROJECT_BINARY_DIR}/doc-check)
  set_tests_properties(unit.api_reference PROPERTIES LABELS unit)
endif()
find_program(VFAB_DOXYGEN doxygen)
if(NOT VFAB_DOXYGEN)
  message(STATUS "doxygen not found: no doc target (scripts/setup installs it)")
  return()
endif()
file(GLOB_RECURSE vfab_public_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/vfab/*.hpp ${PROJECT_SOURCE_DIR}/include/vfab/*.h)
add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/doc/html/index.html
                   COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/doc
                   COMMAND ${VFAB_DOXYGEN} ${PROJECT_BINARY_DIR}/Doxyfile
                   DEPENDS ${vfab_public_headers} ${PROJECT_BINARY_DIR}/Doxyfile
                           ${PROJECT_SOURCE_DIR}/docs/reference/doxygen_filter.sh ${PROJECT_SOURCE_DIR}/docs/reference/mainpage.md
                   COMMENT "API reference (Doxygen): ${PROJECT_BINARY_DIR}/doc" VERBATIM)
add_custom_target(doc DEPENDS ${PROJECT_BINARY_DIR}/doc/html/index.html)
add_custom_target(doc_undocumented
                  COMMAND ${PROJECT_SOURCE_DIR}/docs/reference/undocumented.sh ${PROJECT_BINARY_DIR}/doc/warnings.log
                  DEPENDS doc VERBATIM)
install(DIRECTORY ${PROJECT_BINARY_DIR}/doc/html/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/html COMPONENT dev OPTIONAL)
install(DIRECTORY ${PROJECT_BINARY_DIR}/doc/man/ DESTINATION ${CMAKE_INSTALL_MANDIR} COMPONENT dev OPTIONAL)
