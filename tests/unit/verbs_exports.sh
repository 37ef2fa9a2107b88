#!/usr/bin/env bash
# The drop-in libibverbs exports what the system's does: every symbol with its version, default
# or hidden, functions and data alike (`objdump -T` of both, compared line by line), and its
# soname is the system's; vfab's library may add its own version node (VFAB_*_PRIVATE_*, the
# calls between vfab's librdmacm and libibverbs: verbs/private_hook.hpp), nothing else. Also: the library never names the kernel's RDMA interfaces
# (/dev/infiniband, /sys/class/infiniband_verbs, NETLINK_RDMA's socket) in its code.
#   verbs_exports.sh VFAB_LIB SYSTEM_LIB   (libibverbs or librdmacm)
set -euo pipefail
ours=$1 system=$2
exports() { objdump -T "$1" | awk '$0 !~ /\*UND\*/ && NF >= 7 && ($3 == "DF" || $3 == "DO") && $(NF-1) !~ /^VFAB_.*_PRIVATE_/ {print $3, $(NF-1), $NF}' | sort; }
if ! d=$(diff <(exports "$system") <(exports "$ours")); then
    echo "exports differ (< the system's, > vfab's):"
    echo "$d"
    exit 1
fi
soname() { objdump -p "$1" | awk '$1 == "SONAME" {print $2}'; }
[[ $(soname "$ours") == "$(soname "$system")" ]] || { echo "soname $(soname "$ours"), the system's $(soname "$system")"; exit 1; }
if strings "$ours" | grep -E '^/dev/infiniband|/sys/class/infiniband_verbs'; then
    echo "the library names a kernel RDMA interface (above)"
    exit 1
fi
echo "ok: $(exports "$ours" | wc -l) symbols, as $system"
