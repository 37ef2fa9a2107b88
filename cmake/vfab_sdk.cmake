# The installed SDK (`cmake --install`; docs/install.md): libvfab.so.1 and libvfab.a, each
# driver's direct API as a static library with the DMA, VFIO, virtio and transport libraries
# under it, the headers, find_package(vfab CONFIG) with imported targets vfab::<name>,
# pkg-config files (vfab.pc, vfab-<driver>.pc), vfio-devctl and its man page (tools/).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(vfab_drivers GLOBAL PROPERTY VFAB_DRIVERS)   # vfab_e1000e, ...
set(vfab_sdk_libs vfab_vfio vfab_dma vfab_virtio vfab_transport ${vfab_drivers})
foreach(t IN LISTS vfab_sdk_libs)
  string(REGEX REPLACE "^vfab_" "" export_name ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${export_name})
endforeach()
set_target_properties(vfab PROPERTIES EXPORT_NAME vfab)
set_target_properties(vfab_static PROPERTIES EXPORT_NAME vfab_static)

install(TARGETS vfab EXPORT vfabTargets COMPONENT runtime
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT dev)
install(TARGETS vfab_static ${vfab_sdk_libs} EXPORT vfabTargets COMPONENT dev
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/vfab DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(DIRECTORY DESTINATION ${CMAKE_INSTALL_LIBDIR}/vfab/providers COMPONENT runtime)

set(vfab_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/vfab)
install(EXPORT vfabTargets NAMESPACE vfab:: DESTINATION ${vfab_cmake_dir} COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/vfabConfig.cmake.in ${PROJECT_BINARY_DIR}/sdk/vfabConfig.cmake
                              INSTALL_DESTINATION ${vfab_cmake_dir})
# 0.x: a minor release may change the API, so only the same minor version matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sdk/vfabConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sdk/vfabConfig.cmake ${PROJECT_BINARY_DIR}/sdk/vfabConfigVersion.cmake
        DESTINATION ${vfab_cmake_dir} COMPONENT dev)

# pkg-config: prefix relative to the .pc file, so that an install moved elsewhere (a DESTDIR,
# a package) still finds itself.
file(RELATIVE_PATH vfab_pc_up /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
set(vfab_pc_prefix "\${pcfiledir}/${vfab_pc_up}")
string(REGEX REPLACE "/$" "" vfab_pc_prefix ${vfab_pc_prefix})
configure_file(${CMAKE_CURRENT_LIST_DIR}/vfab.pc.in ${PROJECT_BINARY_DIR}/sdk/vfab.pc @ONLY)
set(vfab_pc_files ${PROJECT_BINARY_DIR}/sdk/vfab.pc)
foreach(t IN LISTS vfab_drivers)
  string(REGEX REPLACE "^vfab_" "" driver ${t})
  get_property(extra GLOBAL PROPERTY VFAB_DRIVER_LIBS_${driver})   # vfab::virtio, vfab::igb
  set(vfab_pc_driver_libs "-lvfab_${driver}")
  foreach(lib IN LISTS extra)
    string(REPLACE "vfab::" "-lvfab_" lib ${lib})
    string(APPEND vfab_pc_driver_libs " ${lib}")
  endforeach()
  string(APPEND vfab_pc_driver_libs " -lvfab_dma -lvfab_vfio")
  set(vfab_pc_driver ${driver})
  configure_file(${CMAKE_CURRENT_LIST_DIR}/vfab-driver.pc.in ${PROJECT_BINARY_DIR}/sdk/vfab-${driver}.pc @ONLY)
  list(APPEND vfab_pc_files ${PROJECT_BINARY_DIR}/sdk/vfab-${driver}.pc)
endforeach()
install(FILES ${vfab_pc_files} DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
