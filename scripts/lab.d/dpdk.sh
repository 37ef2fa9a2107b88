# DPDK in the lab guest (scripts/lab --dpdk). Sourced by scripts/lab.
#
# Copies Debian's dpdk-testpmd (package dpdk-dev, 22.11), every library it loads and a set of
# DPDK PMD plugins with theirs, plus lab.d/dpdk-pps.sh, into the initramfs. DPDK is picky
# about how its libraries lie on disk:
#   - EAL dlopen()s every *.so and *.so.23.0 in its plugin directory (compiled in:
#     DPDK_PLUGIN_PATH=/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0). Debian links librte_bus_pci.so.23
#     and friends from /usr/lib/x86_64-linux-gnu into that directory. A library that exists
#     twice as separate files is loaded twice and DPDK panics ("tailq is already registered"),
#     so the symlinks are copied as symlinks, and the guest's /lib/x86_64-linux-gnu is a link
#     to /usr/lib/x86_64-linux-gnu (initramfs.sh), as on the host.
#   - libgcc_s.so.1 is dlopen()ed by glibc (thread cancellation), invisible to ldd.
#   - Every plugin in the directory must load, so each comes with the libraries it needs.

# The plugins the guest gets (librte_<name>.so in the plugin directory). testpmd itself links
# a few more (bnxt, i40e, ixgbe, ice, mlx5, bond, dpaa, ...): they come along as its libraries.
DPDK_PLUGINS=(bus_pci bus_vdev mempool_ring net_e1000 net_virtio net_vhost)

# dpdk_copy_path STAGE PATH: PATH into STAGE at its canonical directory, following and
# recreating each symlink on the way to the file (Debian's layout, see above).
dpdk_copy_path() {
    local stage=$1 dir name target hops=0
    dir=$(readlink -f "$(dirname "$2")"); name=$(basename "$2")
    while ((hops++ < 16)); do
        mkdir -p "$stage$dir"
        if [[ -L $dir/$name ]]; then
            target=$(readlink "$dir/$name")
            [[ -e $stage$dir/$name || -L $stage$dir/$name ]] || ln -s "$target" "$stage$dir/$name"
            [[ $target == /* ]] || target=$dir/$target
            dir=$(readlink -f "$(dirname "$target")"); name=$(basename "$target")
        else
            [[ -e $stage$dir/$name ]] || install -m 0755 "$dir/$name" "$stage$dir/$name"
            return 0
        fi
    done
    die "dpdk: too many symlinks behind $2"
}

# dpdk_copy_with_libs STAGE FILE: FILE and every library ldd says it loads, layout kept. The
# program interpreter goes to /lib64 as a plain file, like the lab's other binaries.
dpdk_copy_with_libs() {
    local stage=$1 file=$2 lib
    dpdk_copy_path "$stage" "$file"
    while read -r lib; do
        if [[ $lib == /lib64/* ]]; then
            [[ -e $stage$lib ]] || install -D -m 0755 "$(readlink -f "$lib")" "$stage$lib"
        else
            dpdk_copy_path "$stage" "$lib"
        fi
    done < <(ldd "$file" 2>/dev/null | awk '/=> \// {print $3} /^\t\// {print $1}')
}

# dpdk_payload DIR: builds the tree --dpdk adds to the initramfs (without dpdk-pps) in DIR.
dpdk_payload() {
    local stage=$1 testpmd eal plugdir p
    testpmd=$(command -v dpdk-testpmd) \
        || die "dpdk: dpdk-testpmd missing — run scripts/setup (Debian packages dpdk, dpdk-dev)"
    eal=$(ldd "$testpmd" | awk '$1 ~ /^librte_eal\.so/ {print $3}')
    [[ -n $eal ]] || die "dpdk: $testpmd does not load librte_eal"
    # The plugin directory EAL was built with.
    # (awk reads to the end: a reader quitting early would kill the writer with SIGPIPE.)
    plugdir=$(strings -a "$(readlink -f "$eal")" | awk -F= '$1 == "DPDK_PLUGIN_PATH" && !d {print $2; d = 1}')
    [[ -d $plugdir ]] || die "dpdk: EAL's plugin directory '$plugdir' does not exist"
    dpdk_copy_with_libs "$stage" "$testpmd"
    for p in "${DPDK_PLUGINS[@]}"; do
        [[ -e $plugdir/librte_$p.so ]] \
            || die "dpdk: no plugin librte_$p.so in $plugdir (Debian package librte-${p//_/-}23?)"
        dpdk_copy_with_libs "$stage" "$plugdir/librte_$p.so"
    done
    # dlopen()ed by glibc, not seen by ldd.
    p=$(ldconfig -p | awk '/libgcc_s\.so\.1 .*x86-64/ && !d {print $NF; d = 1}')
    [[ -f $p ]] || die "dpdk: libgcc_s.so.1 not found (ldconfig -p)"
    dpdk_copy_path "$stage" "$p"
    mkdir -p "$stage/var/run"   # EAL's runtime directory is /var/run/dpdk
}

# dpdk_stage STAGE: everything --dpdk adds to the initramfs. The payload (~2 s to gather) is
# cached under $VFAB_CACHE/dpdk, keyed by this file and the host's package database: any
# package installed or upgraded (DPDK, glibc, ...) makes the next run gather it anew.
dpdk_stage() {
    local stage=$1 key dir tmp old
    key=$(cat "${BASH_SOURCE[0]}" <(stat -c %Y:%s /var/lib/dpkg/status) | sha256sum | cut -c1-16)
    dir=$VFAB_CACHE/dpdk/$key
    if [[ ! -d $dir ]]; then
        mkdir -p "$VFAB_CACHE/dpdk"
        for old in "$VFAB_CACHE"/dpdk/*; do [[ -d $old ]] && rm -rf "$old"; done
        find "$VFAB_CACHE/dpdk" -maxdepth 1 -name '.new.*' -mmin +60 -exec rm -rf {} +
        tmp=$(mktemp -d "$VFAB_CACHE/dpdk/.new.XXXXXX")
        dpdk_payload "$tmp"
        mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"   # lost a race: same payload
    fi
    cp -a "$dir/." "$stage/"
    install -D -m 0755 "$LAB_DIR/dpdk-pps.sh" "$stage/vfab/bin/dpdk-pps"
}
