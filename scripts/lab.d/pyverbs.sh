# rdma-core's own test suite in the lab guest (scripts/lab --pyverbs). Sourced by scripts/lab.
#
# Copies Debian's python3-pyverbs (44.0) and what it needs to run there:
#   /usr/bin/python3.11, python3       the interpreter (Debian builds most C modules into it)
#   /usr/lib/python3.11/...            only the standard library modules the suite loads, each
#                                      with its Debian-compiled .pyc (mtimes kept, so they are
#                                      used: compiling under TCG is slow), and the lib-dynload
#                                      extensions among them with their libraries
#   /usr/lib/python3/dist-packages/pyverbs   all of pyverbs (the suite imports its mlx5 and efa
#                                      parts too), with every library ldd shows: libpython3.11,
#                                      librdmacm, libmlx5, libefa, libnl (libibverbs is there
#                                      already: initramfs.sh's rdma_stage)
#   /usr/share/doc/rdma-core/tests     the suite as Debian ships it (34 of 55 files gzipped)
# lab.d/pyverbs-modules.py finds the modules by importing the suite on this machine the way its
# run_tests.py does, plus the few it imports only while running. tests/lab/pyverbs_test.cpp
# runs the suite and fails on any "No module named" it did not expect.

PYVERBS_TESTS=/usr/share/doc/rdma-core/tests

# pyverbs_copy_module STAGE PATH: a module file (a .py with its __pycache__ .pyc, or an
# extension with its libraries) to the same path in STAGE.
pyverbs_copy_module() {
    local stage=$1 path=$2 pyc
    [[ -e $stage$path ]] && return 0
    case $path in
    *.py)
        install -D -p -m 0644 "$path" "$stage$path"
        pyc=$(dirname "$path")/__pycache__/$(basename "$path" .py).cpython-${PYVERBS_PYVER//./}.pyc
        [[ -f $pyc ]] && install -D -p -m 0644 "$pyc" "$stage$pyc"
        ;;
    *.so) copy_with_libs "$stage" "$path" "${path#/}" ;;
    *) die "pyverbs: unexpected module file $path" ;;
    esac
    return 0
}

# pyverbs_stage STAGE: everything --pyverbs adds to the initramfs (about 1 s to gather).
pyverbs_stage() {
    local stage=$1 python tmp path n=0
    python=$(readlink -f /usr/bin/python3)
    [[ -x $python && -d /usr/lib/python3/dist-packages/pyverbs && -d $PYVERBS_TESTS ]] \
        || die "pyverbs: python3 or python3-pyverbs missing — run scripts/setup"
    PYVERBS_PYVER=$(basename "$python"); PYVERBS_PYVER=${PYVERBS_PYVER#python}
    copy_with_libs "$stage" "$python" "${python#/}"
    ln -sf "$(basename "$python")" "$stage/usr/bin/python3"
    # The interpreter finds its prefix by this landmark; lib-dynload must exist.
    install -D -p -m 0644 "/usr/lib/python$PYVERBS_PYVER/os.py" "$stage/usr/lib/python$PYVERBS_PYVER/os.py"
    mkdir -p "$stage/usr/lib/python$PYVERBS_PYVER/lib-dynload"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/vfab-pyverbs.XXXXXX")
    cp -r "$PYVERBS_TESTS/." "$tmp/"
    gunzip -f "$tmp"/*.gz
    # Its own interpreter, not whatever python3 comes first in PATH (a pyenv's, say).
    while read -r path; do
        [[ $path == FAILED ]] && die "pyverbs: lab.d/pyverbs-modules.py failed (run it by hand on a gunzipped copy of $PYVERBS_TESTS)"
        pyverbs_copy_module "$stage" "$path"
        n=$((n + 1))
    done < <(cd "$tmp" && "$python" -I "$LAB_DIR/pyverbs-modules.py" "$tmp" || echo FAILED)
    rm -rf "$tmp"
    [[ $n -gt 50 ]] || die "pyverbs: lab.d/pyverbs-modules.py failed to list the suite's modules"
    [[ -e $stage/usr/lib/python3/dist-packages/pyverbs/device.cpython-${PYVERBS_PYVER//./}-x86_64-linux-gnu.so ]] \
        || die "pyverbs: pyverbs' modules not among the suite's ($n files)"
    mkdir -p "$stage/usr/share/doc/rdma-core"
    cp -r "$PYVERBS_TESTS" "$stage/usr/share/doc/rdma-core/"
}
