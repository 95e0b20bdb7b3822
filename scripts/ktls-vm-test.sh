#!/usr/bin/env bash
# The kernel-TLS end-to-end test, for real: build `linerate` and the `ktls_vm` test
# binary as static executables, boot a stock Debian kernel that ships kTLS (tls.ko) in
# a throw-away qemu VM (scripts/ktls-vm/run-in-vm.sh), and run the test inside it over
# loopback. The build machines' own kernel has no CONFIG_TLS, so this is the only
# place the kernel path runs.
#
#   scripts/ktls-vm-test.sh            # build + boot + test; exit status is the test's
#
# Environment:
#   KTLS_VM_TARGET_DIR  cargo target dir for the static build (default target/ktls-vm,
#                       kept apart so the static flags never invalidate the normal build)
#   KTLS_VM_TIMEOUT     seconds for boot + test (default 300: TCG emulation is slow)
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

echo "== static build (linerate + ktls_vm test) into $target_dir"
cargo build --target "$triple" -p linerate --bin linerate
test_bin=$(cargo test --target "$triple" -p linerate --test ktls_vm --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -n "$test_bin" ] && [ -x "$test_bin" ] || { echo "ktls-vm-test: no test executable built" >&2; exit 1; }
server_bin="$target_dir/$triple/debug/linerate"
for b in "$server_bin" "$test_bin"; do
    if readelf -l "$b" 2>/dev/null | grep -q 'INTERP'; then
        echo "ktls-vm-test: $b is dynamically linked" >&2
        exit 1
    fi
done

echo "== running $(basename "$test_bin") in the kTLS VM"
exec scripts/ktls-vm/run-in-vm.sh --timeout "${KTLS_VM_TIMEOUT:-300}" --mem 1G \
    --file "$server_bin:/linerate" --env LINERATE_BIN=/linerate --env RUST_BACKTRACE=1 \
    --workdir /tmp \
    -- "$test_bin" --test-threads 1 --nocapture
