#!/bin/sh
# Instructions per message of vfab's RDMA transport (RC WRITE and SEND, 64 B, 1 KiB, 4 KiB,
# path MTU 1024), counted by callgrind in bench/rdma_fastpath: two ports over two fake raw
# devices wired in memory (tests/unit/rdma_fake_link.hpp). Collected inside the bench's
# counted_* calls into the transport only, with the fake devices' own functions (their queue
# pair's post_send / post_recv and their CQs' poll, which copy frames over the wire model)
# toggled off again, so the figure is requester + completer + responder, nothing of the model.
#   bench/rdma_callgrind.sh [BUILD_DIR] [MESSAGES] [CRC32]      (build/release, 10000, clmul)
# CRC32: the ICRC's method, clmul (PCLMULQDQ folding, what a native CPU that has it picks) or
# tables; never auto, which under valgrind would time valgrind's emulation of PCLMULQDQ.
# Two shapes each: one message at a time (window 1, each signalled) and a window of 32 with
# a completion every 8. Last, a fast-registration cycle (REG_MR of 64 KiB + LOCAL_INV, one
# post_send call, the LOCAL_INV's completion polled; its 16 blocks one run, then scattered):
# post_send and the poll, per cycle.
set -eu
build=${1:-build/release}
messages=${2:-10000}
crc32=${3:-clmul}
exe=$build/bench/rdma_fastpath
[ -x "$exe" ] || { echo "no $exe: cmake --build --preset release --target rdma_fastpath" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is missing: scripts/setup installs it" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# inclusive FILE PATTERN: the inclusive Ir of the functions whose name matches PATTERN (summed).
inclusive() {
    callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
        awk -v p="$2" '$0 ~ p { gsub(",", "", $1); s += $1 } END { print s + 0 }'
}
exclusive() {
    callgrind_annotate --inclusive=no --threshold=100 "$1" 2>/dev/null |
        awk -v p="$2" '$0 ~ p { gsub(",", "", $1); s += $1 } END { print s + 0 }'
}
printf '%-5s %6s %-10s %8s | %9s %9s %9s | %7s %7s\n' op size shape "Ir/msg" post_send req_poll responder icrc memcpy
for op in write send; do
    for size in 64 1024 4096; do
        for shape in "1 1" "32 8"; do
            # shellcheck disable=SC2086 # $shape is two words: WINDOW SIGNAL
            set -- $shape
            out=$tmp/cg.$op.$size.$1
            valgrind --tool=callgrind --callgrind-out-file="$out" \
                --toggle-collect='counted_*' --toggle-collect='*FakeQp::post_send*' \
                --toggle-collect='*FakeQp::post_recv*' --toggle-collect='*FakeCq::poll*' \
                "$exe" "$op" "$size" "$messages" "$1" "$2" "$crc32" >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
            total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
            post=$(inclusive "$out" 'counted_post_send')
            rpoll=$(inclusive "$out" 'counted_requester_poll')
            resp=$(inclusive "$out" 'counted_responder_')
            icrc=$(exclusive "$out" 'Crc32::update|icrc_begin_ipv4|icrc_ipv4|_folded|masked_headers|icrc_by_')
            copy=$(exclusive "$out" '__memcpy|__memmove')
            printf '%-5s %6s %-10s %8d | %9d %9d %9d | %7d %7d\n' "$op" "$size" "w$1/s$2" $((total / messages)) \
                $((post / messages)) $((rpoll / messages)) $((resp / messages)) $((icrc / messages)) $((copy / messages))
        done
    done
done
# Fast registration: a REG_MR of 64 KiB (16 blocks, one run or scattered) and a LOCAL_INV,
# posted together, per cycle.
for op in regmr regmr-scattered; do
    out=$tmp/cg.$op
    valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect='counted_*' \
        "$exe" "$op" 65536 "$messages" >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
    total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
    post=$(inclusive "$out" 'counted_post_send_list')
    rpoll=$(inclusive "$out" 'counted_requester_poll')
    printf '%-5s %6s %-10s %8d | %9d %9d\n' "$op" 65536 cycle $((total / messages)) $((post / messages)) $((rpoll / messages))
done
# The drop-in libibverbs (verbs/, docs/verbs.md): the same loops, the application's calls made as
# an unmodified program makes them (ibv_post_send, ibv_poll_cq, ibv_post_recv), against the
# native API's figure from the same build.
printf '\n%-5s %6s %-10s %8s %8s %6s\n' op size shape native verbs ratio
for op in write send; do
    for size in 64 4096; do
        for api in native verbs; do
            out=$tmp/cg.$op.$size.$api
            valgrind --tool=callgrind --callgrind-out-file="$out" \
                --toggle-collect='counted_*' --toggle-collect='*FakeQp::post_send*' \
                --toggle-collect='*FakeQp::post_recv*' --toggle-collect='*FakeCq::poll*' \
                "$exe" "$op" "$size" "$messages" 32 8 "$crc32" "$api" >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
            t=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
            eval "ir_$api=\$((t / messages))"
        done
        # shellcheck disable=SC2154 # ir_native and ir_verbs are set by the eval above
        printf '%-5s %6s %-10s %8d %8d %6s\n' "$op" "$size" w32/s8 "$ir_native" "$ir_verbs" \
            "$(awk -v a="$ir_verbs" -v b="$ir_native" 'BEGIN { printf "%.3f", a / b }')"
    done
done
echo "Ir/msg = post_send + req_poll + responder (instructions per message, $messages messages after a warm-up);"
echo "icrc and memcpy: the part of Ir/msg spent computing or checking ICRCs and copying payloads, both sides."
echo "wN/sK: N messages outstanding at most, a completion every K. regmr: per REG_MR + LOCAL_INV cycle."
echo "native / verbs: the application's calls through vfab's API or through the drop-in libibverbs' ones."
