#!/usr/bin/env bash
# The project's one test command (README.md gives it; .ci/run runs exactly it).
#
# On a fresh machine with the Rust toolchain it needs nothing else installed: the
# end-to-end tests start their own linerate servers on 127.0.0.1 with content they
# create, and the fuzz smoke run installs cargo-fuzz from crates.io when missing.
#
#   scripts/test.sh            # gate + all tests + 15 s per fuzz target
#   FUZZ_SECONDS=0 scripts/test.sh   # skip the fuzz smoke run (local iteration)
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in rustfmt cargo-clippy; do
    command -v "$tool" >/dev/null || { echo "missing $tool: rustup component add rustfmt clippy" >&2; exit 1; }
done

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --workspace
fuzz_seconds="${FUZZ_SECONDS:-15}"
if [ "$fuzz_seconds" -gt 0 ]; then
    echo "== fuzz smoke run (${fuzz_seconds}s per target)"
    fuzz/smoke.sh "$fuzz_seconds"
fi
echo "== all checks passed"
