# Debian packages (`cpack -G DEB` in a build directory; docs/install.md):
#   libvfab1     libvfab.so.1 and the (empty) provider directory         component runtime
#   libvfab-dev  headers, libvfab.so, libvfab.a, the drivers' static libraries, CMake config,
#                pkg-config files                                         component dev
#   vfab-tools   vfio-devctl and its man page                             component tools
# Installed under /usr whatever CMAKE_INSTALL_PREFIX the build has: libvfab finds its provider
# directory beside itself (api/registry.cpp) and the .pc files find their prefix from where they
# are, so one build serves a prefix install and the packages alike.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME vfab)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "vfab developers <vfab@users.noreply.github.com>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)        # Depends: from the ELF files (dpkg-shlibdeps)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # libvfab1's shlibs file, for packages built on it
set(vfab_deb_version "${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libvfab1)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "vfab: user-space NIC drivers over Linux VFIO (shared library)\n"
    " libvfab.so.1: the multiplexed C++ API and the C API over vfab's drivers (e1000e, igb, igbvf,\n virtio-net).")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libvfab-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libvfab1 (= ${vfab_deb_version}), libnuma-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION "vfab: user-space NIC drivers over Linux VFIO (development files)\n"
    " Headers, libvfab.a, each driver's direct API as a static library, CMake package\n (find_package(vfab)) and pkg-config files.")
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME vfab-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION admin)
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "vfab: user-space NIC drivers over Linux VFIO (tools)\n"
    " vfio-devctl: list, check, bind and unbind devices for vfio-pci.")
include(CPack)
