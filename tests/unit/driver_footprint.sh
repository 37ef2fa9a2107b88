#!/bin/sh
# What a driver touches outside its own folder and header: docs/drivers.md says a new driver
# adds drivers/<name>/, include/vfab/drivers/<name>.hpp (and <name>/), its tests, and three
# lines elsewhere — drivers/CMakeLists.txt, api/providers/<name>.hpp and its line in
# api/builtin_providers.cpp. This counts, for every driver drivers/CMakeLists.txt adds, the
# library files whose code (comments aside) names it, and fails on any other file.
#   tests/unit/driver_footprint.sh [SOURCE_DIR]
set -eu
src=${1:-.}
cd "$src"
# Known relations, not a new driver's cost: the 82576 VF (igbvf) and its PF (igb) name each
# other's IDs in their "this is the other function" messages and share igb's queue steps; the
# build tree makes the e1000e provider a plugin too, to test the plugin path with a real driver.
allowed_extra() {
    case $1 in
    igb) echo "drivers/igbvf/device.cpp drivers/igbvf/device_impl.hpp drivers/igbvf/CMakeLists.txt include/vfab/drivers/igbvf.hpp" ;;
    igbvf) echo "drivers/igb/device.cpp" ;;
    e1000e) echo "api/providers/e1000e_plugin.cpp api/CMakeLists.txt" ;;
    esac
}
drivers=$(sed -n 's/^add_subdirectory(\(.*\))$/\1/p' drivers/CMakeLists.txt | grep -v -x -e virtio -e common -e intel)
[ -n "$drivers" ] || { echo "no drivers found in drivers/CMakeLists.txt" >&2; exit 1; }
bad=0
for d in $drivers; do
    allowed="drivers/CMakeLists.txt api/providers/$d.hpp api/builtin_providers.cpp $(allowed_extra "$d")"
    touched=0
    for f in $(find api drivers include tools transport dma vfio -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name CMakeLists.txt \) | sort); do
        case $f in drivers/$d/* | include/vfab/drivers/$d.hpp | include/vfab/drivers/$d/*) continue ;; esac
        # Code only: // comments dropped; in CMake files, # comments.
        case $f in *CMakeLists.txt) strip='s:#.*$::' ;; *) strip='s://.*$::' ;; esac
        if sed "$strip" "$f" | grep -qE "\\b$d::|drivers/$d[./]|\\bvfab_$d\\b|vfab::$d\\b|providers/$d\\.hpp|\\($d\\)|<$d::"; then
            touched=$((touched + 1))
            case " $allowed " in
            *" $f "*) ;;
            *) echo "$d: $f names the driver: a driver must not need edits outside the files docs/drivers.md lists"; bad=1 ;;
            esac
        fi
    done
    echo "$d: $touched files outside its folder and header name it (allowed: $allowed)"
done
exit $bad
