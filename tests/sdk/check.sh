#!/bin/bash
# check.sh SOURCE_DIR BUILD_DIR OUT_DIR VERSION: installs BUILD_DIR into OUT_DIR/prefix and builds
# examples/standalone against that install the three ways a user would — find_package with
# libvfab.so.1, find_package with libvfab.a, pkg-config — into OUT_DIR/bin (the lab's sdk_test
# then runs them on a device). Checks what each program links, that each starts (usage, then
# a clear error for a device that is not there), and the pkg-config and CMake metadata.
set -uo pipefail
src=$1 build=$2 out=$3 version=${4:?VERSION: the project version (CMake passes it)}
prefix=$out/prefix bin=$out/bin
fail=0
bad() { echo "FAIL: $*"; fail=1; }
step() { echo "== $*"; }
run() { "$@" > "$out/last.log" 2>&1 || { cat "$out/last.log"; bad "$* (exit $?)"; return 1; }; }

rm -rf "$out" && mkdir -p "$bin"
step "cmake --install $build --prefix $prefix"
run cmake --install "$build" --prefix "$prefix" || exit 1
libdir=$(cd "$prefix" && ls -d lib lib64 lib/* 2>/dev/null | while read -r d; do [[ -e $prefix/$d/libvfab.so.1 ]] && echo "$d"; done | head -n1)
[[ -n $libdir ]] || { bad "no libvfab.so.1 under $prefix"; exit 1; }
for f in "$libdir/libvfab.so.1" "$libdir/libvfab.a" "$libdir/libvfab_e1000e.a" "$libdir/cmake/vfab/vfabConfig.cmake" \
         "$libdir/pkgconfig/vfab.pc" "$libdir/pkgconfig/vfab-e1000e.pc" include/vfab/vfab.hpp include/vfab/log.hpp; do
    [[ -e $prefix/$f ]] || bad "the install lacks $f"
done
soname=$(objdump -p "$prefix/$libdir/libvfab.so.1" | awk '$1 == "SONAME" {print $2}')
[[ $soname == libvfab.so.1 ]] || bad "libvfab's soname is '$soname', not libvfab.so.1"

for link in shared static; do
    step "find_package(vfab), VFAB_LINK=$link"
    run cmake -S "$src/examples/standalone" -B "$out/cmake-$link" -DCMAKE_PREFIX_PATH="$prefix" -DVFAB_LINK=$link \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$bin" &&
        run cmake --build "$out/cmake-$link" -j2
done
step "pkg-config"
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
run make -C "$src/examples/standalone" O="$bin"
static_libs=$(pkg-config --static --libs vfab)
[[ $static_libs == *-lnuma* && $static_libs == *-pthread* ]] || bad "pkg-config --static --libs vfab gives '$static_libs' (no -lnuma/-pthread)"
[[ $(pkg-config --modversion vfab) == "$version" ]] ||
    bad "vfab.pc's version is not the project's"
pkg-config --exists vfab-e1000e vfab-igb vfab-igbvf vfab-virtio_net || bad "a driver's .pc file is missing"

step "what each program links, and that it starts"
for p in vfab-hello-shared vfab-hello-pkgconfig; do
    [[ -x $bin/$p ]] || { bad "$p was not built"; continue; }
    links=$(ldd "$bin/$p")   # not piped into grep -q: under pipefail, ldd's SIGPIPE would fail the check at random
    grep -q "libvfab.so.1 => $prefix/" <<<"$links" || bad "$p does not load libvfab.so.1 from the install: $links"
done
for p in vfab-hello-static vfab-hello-e1000e-shared vfab-hello-e1000e-static; do
    [[ -x $bin/$p ]] || { bad "$p was not built"; continue; }
    links=$(ldd "$bin/$p")
    grep -q libvfab <<<"$links" && bad "$p links a shared libvfab; it should carry vfab"
done
for p in vfab-hello-shared vfab-hello-static vfab-hello-pkgconfig vfab-hello-e1000e-shared; do
    [[ -x $bin/$p ]] || continue
    "$bin/$p" > "$out/last.log" 2>&1; rc=$?
    [[ $rc == 2 ]] && grep -q usage "$out/last.log" || bad "$p with no argument: exit $rc, $(cat "$out/last.log")"
    "$bin/$p" 0000:7f:1f.7 > "$out/last.log" 2>&1; rc=$?
    [[ $rc == 1 ]] && grep -q "0000:7f:1f.7" "$out/last.log" || bad "$p on a missing device: exit $rc, $(cat "$out/last.log")"
done
((fail)) && exit 1
echo "ok: installed into $prefix and built the standalone example three ways ($(ls "$bin" | tr '\n' ' '))"
