#!/usr/bin/env bash
# Smoke-run every fuzz target (`cargo fuzz list`) for a few seconds each.
#
#   fuzz/smoke.sh [SECONDS_PER_TARGET]   (default 20)
#
# Installs cargo-fuzz if it is missing. Works on the stable toolchain: cargo-fuzz passes
# `-Z` flags to rustc (sanitizer, coverage passes), and RUSTC_BOOTSTRAP=1 makes stable
# rustc accept them. That is an escape hatch, fine for a test harness that never ships;
# on nightly it is not set. Exits non-zero if any target finds a crash (the reproducer
# lands in fuzz/artifacts/<target>/).
set -euo pipefail

secs="${1:-20}"
cd "$(dirname "$0")"

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
if ! rustc --version | grep -q nightly; then
    export RUSTC_BOOTSTRAP=1
fi

# Every target in Cargo.toml (so new ones are smoke-tested without editing this script),
# or the space-separated FUZZ_TARGETS if set.
targets="${FUZZ_TARGETS:-$(cargo fuzz list)}"
for target in $targets; do
    echo "== $target: ${secs}s"
    mkdir -p "corpus/$target" "seeds/$target"
    # The first corpus dir is written to (git-ignored); seeds/ is read-only input.
    extra=()
    if [ -f "dict/$target.dict" ]; then
        extra+=("-dict=dict/$target.dict")
    fi
    cargo fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$secs" -print_final_stats=1 "${extra[@]}"
done
