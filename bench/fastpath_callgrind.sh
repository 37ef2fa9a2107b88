#!/bin/sh
# Instructions per packet of a driver's fast path (post_recv + post_send + poll of both
# completions), counted by callgrind in the driver_* functions of the fast-path benches only
# (their ring models are not counted), and the driver's MMIO reads and writes per packet
# (another run, without valgrind: bench/mmio_counter.hpp).
#   bench/fastpath_callgrind.sh [e1000e|igb|virtio-RING[-headroom][-inorder]] [BUILD_DIR]   (e1000e, build/release)
# RING: split or packed; -headroom: the virtio-net header in the frame's headroom (one
# descriptor per frame, QpInitAttr::hdr_in_headroom); -inorder: VIRTIO_F_IN_ORDER negotiated.
set -eu
which=${1:-e1000e}
build=${2:-build/release}
case $which in
e1000e) bin=e1000e_fastpath args= ;;
igb) bin=igb_fastpath args= ;;
virtio-split | virtio-packed | virtio-split-* | virtio-packed-*)
    rest=${which#virtio-}
    ring=${rest%%-*}
    layout=chain order=
    case $rest in *-headroom*) layout=headroom ;; esac
    case $rest in *-inorder*) order=in-order ;; esac
    case ${rest#"$ring"} in '' | -headroom | -inorder | -headroom-inorder) ;; *) which=bad ;; esac
    bin=virtio_net_fastpath args="$ring" ;;
*) which=bad ;;
esac
[ "$which" != bad ] || { echo "usage: $0 [e1000e|igb|virtio-split|virtio-packed[-headroom][-inorder]] [BUILD_DIR]" >&2; exit 2; }
exe=$build/bench/$bin
[ -x "$exe" ] || { echo "no $exe: cmake --build --preset release --target $bin" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is missing: scripts/setup installs it" >&2; exit 1; }
frames=20000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for batch in 1 8 32; do
    # shellcheck disable=SC2086 # $args is empty or one word
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$batch" --toggle-collect='*driver_post*' \
        --toggle-collect='*driver_poll*' "$exe" $args "$batch" "$frames" ${layout:+$layout $order} >/dev/null 2>"$tmp/log.$batch" ||
        { cat "$tmp/log.$batch" >&2; exit 1; }
    ir=$(callgrind_annotate "$tmp/cg.$batch" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
    echo "$which batch $batch: $ir instructions for $frames packets = $(( ir / frames )) instructions/packet (rx + tx + completions)"
    # The same loop without valgrind, the driver's MMIO accesses counted (bench/mmio_counter.hpp).
    case $bin in
    virtio_net_fastpath) mmio_args="$args $batch $frames ${layout:-chain} ${order:-any-order} mmio" ;;
    *) mmio_args="$batch $frames mmio" ;;
    esac
    # shellcheck disable=SC2086 # word splitting wanted
    "$exe" $mmio_args | sed "s/^/$which /"
done
