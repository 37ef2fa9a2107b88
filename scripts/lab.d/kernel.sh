# Lab guest kernels, cached under $VFAB_CACHE (default ~/.cache/vfab). Sourced by scripts/lab.
#
#   debian   Debian's own kernel package (the one linux-image-amd64 depends on), downloaded
#            with apt-get download (never installed); its modules go into the initramfs.
#   iommufd  Debian's linux-source-6.12 built with IOMMUFD, VFIO_DEVICE_CDEV and VFIO_NOIOMMU
#            (lab.d/kernel-iommufd.config); everything built in, so no modules.
#
# Both are booted as the uncompressed PVH ELF vmlinux (QEMU -kernel), ~2 s to init under TCG.

VFAB_CACHE=${VFAB_CACHE:-$HOME/.cache/vfab}

die() { echo "lab: $*" >&2; exit 2; }
log() { echo "lab: $*" >&2; }

# vmlinuz -> vmlinux: the payload is the first XZ stream (magic FD 37 7A 58 5A 00).
extract_vmlinux() {
    local in=$1 out=$2 off
    off=$(LC_ALL=C grep -obUaP '\xfd\x37\x7a\x58\x5a\x00' "$in" | head -n1 | cut -d: -f1)
    [[ -n $off ]] || die "no XZ stream in $in: cannot extract vmlinux"
    tail -c +$((off + 1)) "$in" | xz -dc --single-stream > "$out.tmp" 2>/dev/null || true
    file_is_elf "$out.tmp" || die "extracting vmlinux from $in failed (not an ELF)"
    mv "$out.tmp" "$out"
}

file_is_elf() { [[ -s $1 && $(head -c4 "$1" | od -An -c | tr -d ' ') == '177ELF' ]]; }

# Sets KERNEL_VMLINUX, KERNEL_MODDIR (empty when built in) and KERNEL_VERSION.
kernel_debian() {
    local pkg dir deb
    # VFAB_LAB_DEBIAN_KERNEL names another kernel package (e.g. an older ABI) to boot.
    pkg=${VFAB_LAB_DEBIAN_KERNEL:-$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')}
    [[ -n $pkg ]] || die "kernel: cannot resolve the package behind linux-image-amd64 (run: sudo apt-get update)"
    dir=$VFAB_CACHE/kernel/debian/$pkg-$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
    if [[ ! -f $dir/vmlinux ]]; then
        log "kernel: fetching $pkg (download only, not installed)"
        rm -rf "$dir"; mkdir -p "$dir"
        ( cd "$dir" && apt-get download "$pkg" >/dev/null 2>"$dir/download.log" ) \
            || die "kernel: 'apt-get download $pkg' failed — missing kernel package ($(tail -n1 "$dir/download.log"))"
        deb=$(ls "$dir"/*.deb 2>/dev/null | head -n1)
        [[ -n $deb ]] || die "kernel: $pkg downloaded no .deb — missing kernel package"
        dpkg-deb -x "$deb" "$dir/root" || die "kernel: cannot unpack $deb"
        extract_vmlinux "$(ls "$dir"/root/boot/vmlinuz-* | head -n1)" "$dir/vmlinux"
        rm -f "$deb"
    fi
    KERNEL_VMLINUX=$dir/vmlinux
    KERNEL_VERSION=$(ls "$dir/root/lib/modules" | head -n1)
    KERNEL_MODDIR=$dir/root/lib/modules/$KERNEL_VERSION
}

IOMMUFD_RECIPE=1
kernel_iommufd() {
    local here src ver key dir
    here=$(realpath "$(dirname "${BASH_SOURCE[0]}")")
    src=$(ls /usr/src/linux-source-6.12.tar.xz 2>/dev/null) \
        || die "kernel: /usr/src/linux-source-6.12.tar.xz missing — run scripts/setup"
    ver=$(dpkg-query -W -f='${Version}' linux-source-6.12)
    # Bump IOMMUFD_RECIPE when build_iommufd changes in a way that changes the kernel.
    key=$(cat "$here/kernel-iommufd.config" <(echo "$ver $IOMMUFD_RECIPE") | sha256sum | cut -c1-16)
    dir=$VFAB_CACHE/kernel/iommufd-$key
    mkdir -p "$VFAB_CACHE/kernel"
    (
        flock 9
        [[ -f $dir/vmlinux ]] && exit 0
        build_iommufd "$src" "$here/kernel-iommufd.config" "$dir"
    ) 9>"$VFAB_CACHE/kernel/.iommufd.lock" || exit 2
    KERNEL_VMLINUX=$dir/vmlinux
    KERNEL_VERSION=6.12-vfab-iommufd
    KERNEL_MODDIR=
}

build_iommufd() {
    local src=$1 frag=$2 dir=$3 work log_
    work=$dir.build; log_=$dir.build.log
    log "kernel: building the iommufd lab kernel from $(basename "$src") (about 10 min on 2 cores, once; log: $log_)"
    rm -rf "$work"; mkdir -p "$work"
    tar -xf "$src" -C "$work" --strip-components=1 || die "kernel: cannot unpack $src"
    (
        set -e
        cd "$work"
        make x86_64_defconfig
        scripts/kconfig/merge_config.sh -m .config "$frag"
        make olddefconfig
        # merge_config does not tell when a symbol was dropped: check the important ones.
        for s in IOMMUFD VFIO_DEVICE_CDEV VFIO_NOIOMMU VFIO_PCI INTEL_IOMMU PVH; do
            grep -q "^CONFIG_$s=y" .config || { echo "CONFIG_$s did not stick"; exit 1; }
        done
        make -j"$(nproc)" vmlinux
    ) >"$log_" 2>&1 || die "kernel: iommufd kernel build failed — see $log_"
    mkdir -p "$dir"
    cp "$work/vmlinux" "$work/.config" "$dir/"
    rm -rf "$work"
}

# kernel_select FLAVOR: sets KERNEL_* for the flavor.
kernel_select() {
    case $1 in
        debian) kernel_debian ;;
        iommufd) kernel_iommufd ;;
        *) die "unknown kernel flavor '$1' (use debian or iommufd)" ;;
    esac
}
