#!/usr/bin/env bash
# The lab must never be green without its tests having run. This boots the lab with binaries
# that pass, fail, crash, run no test, are missing, hang, stall or freeze, and makes QEMU and the kernel
# download fail, hang before init or skip a test no suite expects, and checks that scripts/lab
# fails each time and says which case it was; and that ctest's wrapper runs a failed binary once
# more, alone, in a new boot (red when it fails again, green and named when it passes).
#   lab_selftest.sh PASS_BIN FAIL_BIN CRASH_BIN EMPTY_BIN HANG_BIN STALL_BIN FREEZE_BIN SKIP_BIN
set -uo pipefail
lab=$(dirname "$0")/../../scripts/lab
ctest_run=$(dirname "$0")/../../scripts/lab.d/ctest-run
pass=$1 fail=$2 crash=$3 empty=$4 hang=$5 stall=$6 freeze=$7 skip=$8
out=$(mktemp); trap 'rm -f "$out"' EXIT
bad=0

# expect RC PATTERN... -- LAB ARGS...: runs the lab, checks its exit status and output.
expect() {
    local want_rc=$1; shift
    local patterns=()
    while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
    shift
    "${runner:-$lab}" "$@" >"$out" 2>&1
    local rc=$? p
    if [[ $rc -ne $want_rc ]]; then
        echo "FAIL: scripts/lab $* exited $rc, expected $want_rc"; tail -n 20 "$out"; bad=1; return
    fi
    for p in "${patterns[@]}"; do
        if ! grep -qE -e "$p" "$out"; then
            echo "FAIL: scripts/lab $*: no line matching '$p'"; tail -n 20 "$out"; bad=1; return
        fi
    done
    echo "ok: scripts/lab $* -> exit $rc, as expected"
}

# Through the wrapper ctest uses, which must print why first: the verdicts that are not
# "passed" come before the lab's own output.
runner=$ctest_run expect 1 "^== Why this lab run is red" "$(basename "$pass") passed" "$(basename "$fail") FAILED \(exit 1\)" \
         "$(basename "$crash") CRASHED \(signal 11, SIGSEGV\)" \
         "$(basename "$empty") RAN NO TEST" "no_such_binary MISSING" \
    -- --timeout 600 run "$pass" "$fail" "$crash" "$empty" /nonexistent/no_such_binary
why_end=$(grep -n -m1 "^== The lab run's output" "$out" | cut -d: -f1)
fail_at=$(grep -n -m1 "$(basename "$fail") FAILED" "$out" | cut -d: -f1)
if [[ -z $why_end || -z $fail_at || $fail_at -gt $why_end ]]; then
    echo "FAIL: ctest-run did not print the failed verdict before the lab's output"; head -n 20 "$out"; bad=1
else
    echo "ok: ctest-run prints why first"
fi
# A binary that failed, with nothing else wrong, runs once more alone in a new boot (a TCG
# guest's stall can fail a test without freezing the guest); failing again, the suite is red.
runner=$ctest_run expect 1 "$(basename "$fail") failed; running it once more, alone, in a new boot" \
         "$(basename "$fail") failed again in a second boot" -- --timeout 600 run "$pass" "$fail"
if [[ $(grep -c "$(basename "$pass") passed$" "$out") -ne 1 ]]; then
    echo "FAIL: ctest-run ran more than the failed binary again"; bad=1
else
    echo "ok: ctest-run runs only the failed binary again"
fi
# Passing the second time, the suite is green and says which binary needed it (a stand-in for
# scripts/lab that fails once: no boot needed to check the wrapper's logic).
fake=$(mktemp -d); trap 'rm -rf "$out" "$fake"' EXIT
mkdir -p "$fake/lab.d" && cp "$ctest_run" "$fake/lab.d/" && cp "$(dirname "$ctest_run")/../test-digest" "$fake/"
cat > "$fake/lab" <<'FAKE'
#!/usr/bin/env bash
if [[ -e ${0%/*}/failed-once ]]; then echo "lab[debian]: flaky_test passed"; exit 0; fi
touch "${0%/*}/failed-once"; echo "lab[debian]: steady_test passed"; echo "lab[debian]: flaky_test FAILED (exit 1)"; exit 1
FAKE
chmod +x "$fake/lab"
runner=$fake/lab.d/ctest-run expect 0 "flaky_test passed in a second boot" -- run /x/steady_test /x/flaky_test

expect 2 "the guest hung: still running after 40 s, in test $(basename "$hang")" \
    -- --timeout 40 run "$hang"
expect 2 "booting once more" "the guest kernel stalled .* in test $(basename "$stall")" \
    -- --timeout 300 run "$stall"
# A boot that froze after a binary finished: the next boots start after it (its result kept).
VFAB_LAB_FROZEN_SECONDS=10 expect 2 "the guest froze .* booting once more" "binaries finished so far: 1 — they keep" \
    "lab: resuming: the first 1 binaries finished in an earlier boot" "retry 3 of 3" \
    "the guest froze \(no heartbeat for 10 s: its vCPUs went to sleep for good\) in test $(basename "$freeze")" \
    -- --timeout 300 run "$pass" "$freeze"
if [[ $(grep -c "^@@vfab:begin $(basename "$pass")$" "$out") -ne 1 ]]; then
    echo "FAIL: a binary that finished before a freeze ran again in a later boot"; bad=1
else
    echo "ok: a binary that finished before a freeze is not run again"
fi
# A boot whose init never starts its heartbeat: QEMU's -S keeps the vCPUs stopped, as a guest
# hung at SeaBIOS's last line. (A boot merely too short to finish is no proof: a fast host's
# init can beat before the watchdog's first look.)
VFAB_LAB_QEMU_EXTRA=-S VFAB_LAB_BOOT_SECONDS=4 expect 2 \
    "the guest hung while booting \(no heartbeat from init within 4 s" "retry 3 of 3" \
    "the guest hung while booting \(no sign of life from init within 4 s\)" -- --timeout 120 run "$pass"
# A skip no suite expects fails the run, by name; listed as expected, it is reported and passes.
expect 1 "$(basename "$skip") SKIPPED LabSelftest.SkipsOnPurpose — not expected" -- run "$skip"
skips=$(mktemp); trap 'rm -rf "$out" "$fake" "$skips"' EXIT
echo 'debian LabSelftest\.SkipsOnPurpose the self-test skips it on purpose' > "$skips"
LAB_EXPECTED_SKIPS=$skips expect 0 "$(basename "$skip") skipped LabSelftest.SkipsOnPurpose, as expected here: the self-test" \
    "$(basename "$skip") passed" -- run "$skip"
VFAB_LAB_QEMU_EXTRA="-device no-such-device" expect 2 "QEMU failed to start" -- run "$pass"
VFAB_LAB_DEBIAN_KERNEL=linux-image-0.0.0-0-none expect 2 "missing kernel package" -- run "$pass"
expect 2 "unknown kernel flavor" -- --kernel nosuch run "$pass"
expect 2 "--timeout wants a number" -- --timeout soon run "$pass"

if ((bad)); then echo "lab self-test: FAILED"; exit 1; fi
echo "lab self-test: all cases reported correctly"
