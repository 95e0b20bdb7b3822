#!/usr/bin/env bash
# The kernel-TLS end-to-end tests, for real: build `linerate` and the `ktls_vm` and
# `tls` test binaries as static executables, boot a stock Debian kernel that ships kTLS
# (tls.ko) in a throw-away qemu VM (scripts/ktls-vm/run-in-vm.sh), and run them inside
# it over loopback. The build machines' own kernel has no CONFIG_TLS, so this is the
# only place the kernel path runs.
#
#   scripts/ktls-vm-test.sh            # build + boot + test; exit status is the tests'
#
# Environment:
#   KTLS_VM_TARGET_DIR  cargo target dir for the static build (default target/ktls-vm,
#                       kept apart so the static flags never invalidate the normal build)
#   KTLS_VM_TIMEOUT     seconds for boot + tests (default 300: TCG emulation is slow)
#   KTLS_VM_RELEASE=1   build optimised binaries (the throughput figures of
#                       docs/benchmarks.md; the test run uses debug builds)
#   KTLS_VM_ONLY        run only the ktls_vm tests whose names contain this (and not
#                       the HTTPS suite), e.g. "versus" for the throughput comparisons
#   KTLS_VM_*           passed through to run-in-vm.sh (cache dir, kernel package...)
#
# Static glibc rather than musl: ring's C code needs a C compiler for the target, and
# plain gcc is what a fresh machine has (no musl-gcc). Only 127.0.0.1 is used, so
# static glibc's resolver limits do not matter.
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir="${KTLS_VM_TARGET_DIR:-target/ktls-vm}"
triple=x86_64-unknown-linux-gnu
export RUSTFLAGS="-C target-feature=+crt-static"
export CARGO_TARGET_DIR="$target_dir"

profile_flag=()
profile_dir=debug
if [ "${KTLS_VM_RELEASE:-0}" = 1 ]; then
    profile_flag=(--release)
    profile_dir=release
fi
echo "== static $profile_dir build (linerate + the ktls_vm and tls test binaries) into $target_dir"
cargo build "${profile_flag[@]}" --target "$triple" -p linerate --bin linerate
test_exe() { # the executable of integration test $1
    # Select the artifact by target kind and name: the JSON also lists the `linerate`
    # binary the tests depend on, in no fixed order (taking the last "executable" line
    # once picked the server binary after a rebuild, and the VM ran it as the test).
    cargo test "${profile_flag[@]}" --target "$triple" -p linerate --test "$1" --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys
name = sys.argv[1]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target") or {}
    if m.get("reason") == "compiler-artifact" and "test" in t.get("kind", []) \
            and t.get("name") == name and m.get("executable"):
        print(m["executable"])
' "$1" | tail -n 1
}
ktls_bin=$(test_exe ktls_vm)
tls_bin=$(test_exe tls)
server_bin="$target_dir/$triple/$profile_dir/linerate"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for pair in "$server_bin:linerate" "$ktls_bin:ktls_vm" "$tls_bin:tls"; do
    src=${pair%%:*}
    dst="$stage/${pair##*:}"
    [ -n "$src" ] && [ -x "$src" ] || { echo "ktls-vm-test: no executable for $dst" >&2; exit 1; }
    if readelf -l "$src" 2>/dev/null | grep -q 'INTERP'; then
        echo "ktls-vm-test: $src is dynamically linked" >&2
        exit 1
    fi
    # Debug info is most of a debug binary, and the guest holds everything in RAM.
    strip -o "$dst" "$src" 2>/dev/null || cp "$src" "$dst"
done
# What the guest runs: the kTLS test proper (bodies per cipher, control records, the
# kernel's and linerate's counters, relative throughput), then every HTTPS end-to-end
# test again, now over the kernel path (keep-alive, pipelining, resumption, SNI,
# reload, bad input, descriptor leaks; curl is absent there and skipped).
if [ -n "${KTLS_VM_ONLY:-}" ]; then
    printf '%s\n' '#!/bin/sh' "/bin/ktls_vm --test-threads 1 --nocapture '$KTLS_VM_ONLY'" >"$stage/run"
else
    printf '%s\n' '#!/bin/sh' \
        '/bin/ktls_vm --test-threads 1 --nocapture || exit $?' \
        '/bin/tls --test-threads 2' >"$stage/run"
fi
chmod +x "$stage/run"

echo "== running the kTLS tests in the VM"
scripts/ktls-vm/run-in-vm.sh --timeout "${KTLS_VM_TIMEOUT:-300}" --mem 1G \
    --file "$stage/linerate:/bin/linerate" --file "$stage/ktls_vm:/bin/ktls_vm" \
    --file "$stage/tls:/bin/tls" \
    --env LINERATE_BIN=/bin/linerate --env RUST_BACKTRACE=1 \
    --workdir /tmp \
    -- "$stage/run"
