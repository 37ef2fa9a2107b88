#!/bin/bash
# debs.sh SOURCE_DIR BUILD_DIR OUT_DIR VERSION: builds vfab's Debian packages from BUILD_DIR (cpack:
# libvfab1, libvfab-dev, vfab-tools), installs them on this machine with apt-get, builds
# examples/standalone against the system install (find_package with no prefix given, and
# pkg-config), runs vfio-devctl from the package, then purges the packages and checks that they
# left no file behind. Needs root or password-less sudo (CI has both); fails otherwise.
set -uo pipefail
src=$1 build=$2 out=$3 version=${4:?VERSION: the project version (CMake passes it)}
fail=0
bad() { echo "FAIL: $*"; fail=1; }
step() { echo "== $*"; }
as_root() { if ((EUID == 0)); then "$@"; else sudo -n "$@"; fi; }
packages=(libvfab1 libvfab-dev vfab-tools)

as_root true || { echo "FAIL: installing packages needs root or password-less sudo"; exit 1; }
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q installed &&
        { echo "FAIL: $p is already installed here; remove it first (apt-get purge ${packages[*]})"; exit 1; }
done
rm -rf "$out" && mkdir -p "$out"

step "cpack"
(cd "$build" && cpack -G DEB -B "$out/packages" > "$out/cpack.log" 2>&1) || { cat "$out/cpack.log"; exit 1; }
debs=()
for p in "${packages[@]}"; do
    f=$(ls "$out/packages/${p}_"*.deb 2>/dev/null | head -n1)
    [[ -n $f ]] || { bad "cpack made no $p package: $(ls "$out/packages")"; continue; }
    debs+=("$f")
    echo "$(basename "$f"): $(dpkg-deb -f "$f" Depends)"
done
((fail)) && exit 1
contents=$(dpkg-deb -c "$out/packages/libvfab1_"*.deb)   # not piped into grep -q: pipefail
[[ $contents == *" ./usr/lib/libvfab.so.1 -> "* ]] || bad "libvfab1 lacks /usr/lib/libvfab.so.1: $contents"
[[ $(dpkg-deb -f "$out/packages/libvfab1_"*.deb Depends) == *libnuma1* ]] || bad "libvfab1 does not depend on libnuma1"

cleanup() { as_root apt-get purge -y -qq "${packages[@]}" > "$out/purge.log" 2>&1; }
trap cleanup EXIT
step "apt-get install ${debs[*]##*/}"
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}" > "$out/install.log" 2>&1 ||
    { cat "$out/install.log"; bad "apt-get install failed"; exit 1; }

step "the system install, as a user meets it"
[[ -e /usr/lib/libvfab.so.1 && -d /usr/lib/vfab/providers && -e /usr/include/vfab/vfab.hpp ]] ||
    bad "files missing under /usr"
/usr/sbin/vfio-devctl --help > "$out/devctl.log" 2>&1 || bad "vfio-devctl --help: $(cat "$out/devctl.log")"
[[ $(pkg-config --modversion vfab) == "$version" ]] ||
    bad "pkg-config finds no vfab of this version"
if cmake -S "$src/examples/standalone" -B "$out/cmake" -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$out/bin" > "$out/cmake.log" 2>&1 &&
    cmake --build "$out/cmake" -j2 >> "$out/cmake.log" 2>&1; then
    linked=$(ldd "$out/bin/vfab-hello-shared")
    [[ $linked =~ libvfab\.so\.1\ =\>\ (/usr)?/lib/libvfab\.so\.1 ]] || bad "not linked with /usr/lib/libvfab.so.1: $linked"
    "$out/bin/vfab-hello-shared" > /dev/null 2>&1; [[ $? == 2 ]] || bad "vfab-hello-shared does not start"
else
    cat "$out/cmake.log"; bad "find_package(vfab) against the system install"
fi
make -s -C "$src/examples/standalone" O="$out" > "$out/make.log" 2>&1 || { cat "$out/make.log"; bad "pkg-config build"; }

step "the drop-in libibverbs beside the system's, and vfab-run"
[[ -e /usr/lib/vfab/verbs/libibverbs.so.1 && -x /usr/bin/vfab-run ]] || bad "no /usr/lib/vfab/verbs/libibverbs.so.1 or /usr/bin/vfab-run"
system_verbs=$(dpkg -S "$(readlink -f /usr/lib/x86_64-linux-gnu/libibverbs.so.1)" 2>&1)
[[ $system_verbs == libibverbs1:* ]] || bad "the system's libibverbs is not libibverbs1's any more: $system_verbs"
loaded=$(/usr/bin/vfab-run -- ldd /usr/bin/ibv_devices 2>&1)
[[ $loaded == *"libibverbs.so.1 => /usr/lib/vfab/verbs/libibverbs.so.1"* ]] || bad "vfab-run does not load vfab's libibverbs: $loaded"
loaded=$(ldd /usr/bin/ibv_devices 2>&1)
[[ $loaded == *"libibverbs.so.1 => /lib/x86_64-linux-gnu/libibverbs.so.1"* || $loaded == *"=> /usr/lib/x86_64-linux-gnu/libibverbs.so.1"* ]] ||
    bad "without vfab-run a program no longer loads the system's libibverbs: $loaded"
/usr/bin/vfab-run --quiet -- ibv_devices > "$out/ibv_devices.log" 2>&1 || bad "vfab-run ibv_devices: $(cat "$out/ibv_devices.log")"

step "apt-get purge"
trap - EXIT
cleanup || { cat "$out/purge.log"; bad "apt-get purge failed"; }
for f in /usr/lib/libvfab.so.1 /usr/lib/libvfab.so /usr/lib/libvfab.a /usr/include/vfab /usr/lib/cmake/vfab \
         /usr/lib/pkgconfig/vfab.pc /usr/lib/vfab /usr/sbin/vfio-devctl /usr/bin/vfab-run; do
    [[ -e $f ]] && bad "$f is still there after the purge"
done
((fail)) && exit 1
echo "ok: ${debs[*]##*/} built, installed, used and purged"
