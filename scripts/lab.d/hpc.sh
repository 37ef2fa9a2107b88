# The HPC stack in the lab guest (scripts/lab --hpc; debian flavor). Sourced by scripts/lab.
#
# Copies Debian's packages as they are, for tests/lab/hpc_test.cpp:
#   UCX 1.13 (ucx-utils, libucx0)     ucx_info, ucx_perftest; the transport modules in .../ucx
#   Open MPI 4.1 (openmpi-bin)        orterun, orted; the MCA components, PMIx's, help files
#   MPICH 4.0 (mpich)                 mpiexec.hydra, hydra_pmi_proxy
#   libfabric 1.17 (libfabric-bin)    fi_info, fi_pingpong
# The MPI programs themselves are the project's (tests/lab/mpi_check.c, built for both MPIs)
# and come as --extra files. Each binary and module brings the libraries ldd shows.

HPC_TOOLS=(ucx_info ucx_perftest orterun orted mpiexec.hydra hydra_pmi_proxy fi_info fi_pingpong)
# Directories of modules loaded with dlopen: every shared object in them, with its libraries.
HPC_MODULE_DIRS=(/usr/lib/x86_64-linux-gnu/ucx /usr/lib/x86_64-linux-gnu/openmpi/lib
                 /usr/lib/x86_64-linux-gnu/pmix2/lib)
# Data the launchers read: MCA defaults, help texts.
HPC_DATA=(/etc/openmpi /usr/share/openmpi /usr/lib/x86_64-linux-gnu/pmix2/share)

# hpc_stage STAGE: everything --hpc adds to the initramfs.
hpc_stage() {
    local stage=$1 tool path so d
    for tool in "${HPC_TOOLS[@]}"; do
        path=$(command -v "$tool") \
            || die "hpc: $tool missing — run scripts/setup (ucx-utils, openmpi-bin, mpich, libfabric-bin)"
        copy_with_libs "$stage" "$path" "usr/bin/$tool"
    done
    for d in "${HPC_MODULE_DIRS[@]}"; do
        [[ -d $d ]] || die "hpc: $d missing — run scripts/setup"
        while read -r so; do
            [[ -e $stage$so ]] || copy_with_libs "$stage" "$so" "${so#/}"
        done < <(find "$d" \( -type f -o -type l \) -name '*.so*')
    done
    for d in "${HPC_DATA[@]}"; do
        [[ -d $d ]] || die "hpc: $d missing — run scripts/setup"
        mkdir -p "$stage$(dirname "$d")"
        cp -rL "$d" "$stage$d"
    done
}
