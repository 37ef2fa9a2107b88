#!/usr/bin/env bash
# vfab's librdmacm where it cannot work says why and fails cleanly (Debian's rping, unmodified):
#   - over the system's libibverbs, not vfab's: "runs on vfab's libibverbs only"
#   - over vfab's libibverbs with no vfab device (this machine has no VFIO): "no vfab device"
# Each time rping exits non-zero at once, naming the reason.
#   rdmacm_host.sh VERBS_LIB_DIR   (the build tree's verbs/lib: libibverbs.so.1, librdmacm.so.1)
set -euo pipefail
libdir=$(cd "$1" && pwd)
command -v rping >/dev/null || { echo "rping missing (rdmacm-utils: scripts/setup)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ln -s "$libdir/librdmacm.so.1" "$tmp/librdmacm.so.1"

expect_refusal() {   # WHY LD_LIBRARY_PATH
    local why=$1 out rc=0
    out=$(LD_LIBRARY_PATH=$2 VFAB_VERBS_DEVICES= timeout 30 rping -c -a 127.0.0.1 -C 1 2>&1) || rc=$?
    if ((rc == 0 || rc == 124)); then echo "rping: exit $rc, expected a refusal ($why):"; echo "$out"; exit 1; fi
    grep -qF "$why" <<<"$out" || { echo "rping did not say '$why':"; echo "$out"; exit 1; }
}
expect_refusal "runs on vfab's libibverbs only" "$tmp"
expect_refusal "no vfab device" "$libdir"
echo "ok: both refusals named"
