# Builds the lab guest's initramfs (cpio newc, uncompressed: the fastest for the kernel to
# unpack). Sourced by scripts/lab. Contents:
#   /bin/busybox (static)       the guest's userland
#   /init                       lab.d/guest-init, the guest-side runner
#   /vfab/lab.conf              what this boot is for (mode, flavor, the tests to run)
#   /vfab/bin/*                 the project's binaries, with their shared libraries
#   /usr/share/misc/pci.ids     libpci's ID database (vfio-devctl names the devices with it)
#   /lib/modules/<ver>          (debian flavor) VFIO and NIC driver modules + modules.dep
#   DPDK's dpdk-testpmd, libraries and PMD plugins, /vfab/bin/dpdk-pps   (--dpdk, lab.d/dpdk.sh)
#   Python, python3-pyverbs and rdma-core's test suite     (--pyverbs, lab.d/pyverbs.sh; debian flavor)
#   rdma-core's tools, libibverbs with the rxe provider, iproute2's ip and rdma (debian flavor)

# Kernel modules the guest may load; their dependencies are added from modinfo.
GUEST_MODULES=(vfio-pci vfio_iommu_type1 e1000e igb igbvf virtio_net virtio_pci
               rdma_rxe ib_uverbs rdma_ucm crc32_generic sch_netem e1000 dummy)

# copy_with_libs STAGE FILE DEST: FILE to STAGE/DEST plus every shared library it loads.
# System libraries keep their paths; the project's own (libvfab.so.1 in a build tree, which
# may lie under /tmp, where the guest mounts a tmpfs) go to /vfab/lib, on the guest's
# LD_LIBRARY_PATH.
copy_with_libs() {
    local stage=$1 file=$2 dest=$3 lib
    install -D -m 0755 "$file" "$stage/$dest"
    # ldd prints "name => /path (addr)" and, for the loader, "/lib64/ld-linux... (addr)".
    while read -r lib; do
        case $lib in
        /lib/* | /lib64/* | /usr/*) [[ -e $stage$lib ]] || install -D -m 0755 "$(readlink -f "$lib")" "$stage$lib" ;;
        *) install -D -m 0755 "$(readlink -f "$lib")" "$stage/vfab/lib/$(basename "$lib")" ;;
        esac
    done < <(ldd "$file" 2>/dev/null | awk '/=> \// {print $3} /^\t\// {print $1}')
}

# rdma-core's unmodified tools, for the kernel's soft-RoCE (rdma_rxe) as vfab's RDMA peer
# (tests/lab/rxe_peer.hpp): ibverbs-utils, perftest, and iproute2's rdma. They go to /usr/bin;
# iproute2's ip to /usr/sbin (busybox's ip in /bin comes first in PATH: call /usr/sbin/ip).
# About 5.5 MB on top of what the lab's own binaries bring (libc), gathered in under a second.
RDMA_TOOLS=(ibv_devices ibv_devinfo ibv_asyncwatch ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong ibv_xsrq_pingpong
            ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat ib_atomic_bw ib_atomic_lat
            raw_ethernet_bw raw_ethernet_lat
            rping ucmatose udaddy rdma_server rdma_client rdma_xserver rdma_xclient rstream mckey cmtime
            rdma tc)

# rdma_stage STAGE: the tools above, ip, and libibverbs' rxe provider (the only one: libibverbs
# loads the providers /etc/libibverbs.d names).
rdma_stage() {
    local stage=$1 tool path provider=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
    for tool in "${RDMA_TOOLS[@]}"; do
        path=$(command -v "$tool") \
            || die "initramfs: $tool missing — run scripts/setup (ibverbs-utils, perftest, rdmacm-utils, iproute2)"
        copy_with_libs "$stage" "$path" "usr/bin/$tool"
    done
    [[ -x /usr/sbin/ip || -x /bin/ip ]] || die "initramfs: iproute2's ip missing — run scripts/setup"
    copy_with_libs "$stage" "$( [[ -x /usr/sbin/ip ]] && echo /usr/sbin/ip || echo /bin/ip)" usr/sbin/ip
    [[ -f $provider && -f /etc/libibverbs.d/rxe.driver ]] \
        || die "initramfs: libibverbs' rxe provider missing — run scripts/setup (ibverbs-providers)"
    copy_with_libs "$stage" "$provider" "${provider#/}"
    # rsockets' preload library (librdmacm1): TCP programs' sockets as rsockets.
    local preload=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
    [[ -f $preload ]] || die "initramfs: $preload missing — run scripts/setup (librdmacm1)"
    copy_with_libs "$stage" "$preload" "${preload#/}"
    install -D -m 0644 /etc/libibverbs.d/rxe.driver "$stage/etc/libibverbs.d/rxe.driver"
}

# module_closure MODDIR NAME...: prints the .ko paths (relative to MODDIR) of NAME and its deps.
module_closure() {
    local moddir=$1; shift
    local -A seen=()
    local queue=("$@") m path dep
    while ((${#queue[@]})); do
        m=${queue[0]}; queue=("${queue[@]:1}")
        m=${m//-/_}
        [[ -n ${seen[$m]:-} ]] && continue
        seen[$m]=1
        path=$(find "$moddir/kernel" \( -name "$m.ko*" -o -name "${m//_/-}.ko*" \) | head -n1)
        if [[ -z $path ]]; then
            # Built into this kernel: nothing to copy.
            grep -qE "/(${m}|${m//_/-})\.ko\$" "$moddir/modules.builtin" 2>/dev/null && continue
            die "initramfs: kernel module '$m' is neither in $moddir nor built in"
        fi
        echo "${path#"$moddir"/}"
        for dep in $(modinfo -F depends "$path" | tr ',' ' '); do queue+=("$dep"); done
    done
}

# initramfs_build OUT CONF_FILE BIN...
initramfs_build() {
    local out=$1 conf=$2; shift 2
    local stage ko bin
    stage=$(mktemp -d "${TMPDIR:-/tmp}/vfab-initramfs.XXXXXX")
    mkdir -p "$stage"/{bin,sbin,lib,usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,proc,sys,dev,tmp,run,mnt,vfab/bin,etc}
    # One library directory under two names, as on the host (merged /usr): a library reached
    # by both paths must be one file, or DPDK loads it twice (lab.d/dpdk.sh).
    ln -s ../usr/lib/x86_64-linux-gnu "$stage/lib/x86_64-linux-gnu"
    if (( ${INITRAMFS_DPDK:-0} )); then dpdk_stage "$stage"; fi
    install -m 0755 "$(command -v busybox)" "$stage/bin/busybox"
    file -L "$stage/bin/busybox" | grep -q 'statically linked' \
        || die "initramfs: busybox is not static — install busybox-static (scripts/setup)"
    install -m 0755 "$LAB_DIR/guest-init" "$stage/init"
    install -m 0644 "$conf" "$stage/vfab/lab.conf"
    echo 'root:x:0:0:root:/root:/bin/sh' > "$stage/etc/passwd"
    [[ -f /usr/share/misc/pci.ids ]] \
        || die "initramfs: /usr/share/misc/pci.ids missing — install the pci.ids package (scripts/setup)"
    install -D -m 0644 /usr/share/misc/pci.ids "$stage/usr/share/misc/pci.ids"
    if [[ -n $KERNEL_MODDIR ]]; then
        local dst=$stage/lib/modules/$KERNEL_VERSION
        mkdir -p "$dst"
        for ko in $(module_closure "$KERNEL_MODDIR" "${GUEST_MODULES[@]}"); do
            install -D -m 0644 "$KERNEL_MODDIR/$ko" "$dst/$ko"
        done
        cp "$KERNEL_MODDIR"/modules.builtin* "$KERNEL_MODDIR/modules.order" "$dst/"
        depmod -b "$stage" "$KERNEL_VERSION" || die "initramfs: depmod failed"
        # Only the debian flavor's kernel has rdma_rxe (the iommufd kernel has no RDMA).
        rdma_stage "$stage"
        if (( ${INITRAMFS_PYVERBS:-0} )); then pyverbs_stage "$stage"; fi
        if (( ${INITRAMFS_HPC:-0} )); then hpc_stage "$stage"; fi
    fi
    for bin in "$@"; do
        [[ -f $bin ]] || continue   # reported as missing by the guest, test by test
        copy_with_libs "$stage" "$bin" "vfab/bin/$(basename "$bin")"
    done
    # The guest's / is the stage (mktemp made it 0700, DPDK's cached tree copies its own mode onto
    # it): unprivileged users must reach /vfab/bin.
    chmod 0755 "$stage"
    ( cd "$stage" && find . -print0 | LC_ALL=C sort -z | cpio -o -H newc --null --quiet ) > "$out" \
        || die "initramfs: cpio failed"
    rm -rf "$stage"
}
