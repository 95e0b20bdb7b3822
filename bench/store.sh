#!/usr/bin/env bash
# Object-store benchmark (issue 3): write throughput and index restore time for N objects
# after a clean stop and after a kill -9. Figures go to docs/benchmarks.md, "Store".
#
#   bench/store.sh [N] [DIR]    (default N=1000000, DIR=a new temp dir, removed at exit)
set -euo pipefail
n="${1:-1000000}"
dir="${2:-$(mktemp -d /tmp/linerate-store-bench.XXXXXX)}"
cd "$(dirname "$0")/.."
cargo build --release -q -p linerate-cache --example store_bench
bin=target/release/examples/store_bench
cleanup() { [ -n "${child:-}" ] && kill -9 "$child" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

echo "== write throughput (fresh dirs; 20000 objects of 4 KiB, 2000 of 1 MiB)"
for spec in "20000 4096" "2000 1048576"; do
  set -- $spec
  for dur in nosync sync; do
    rm -rf "$dir/tp"; "$bin" fill "$dir/tp" "$1" 4 "$2" "$dur" | grep wrote
  done
done
rm -rf "$dir/tp"

echo "== $n objects, clean stop, restore"
"$bin" fill "$dir/clean" "$n" 4 512 nosync
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "(page cache dropped)" || true
"$bin" restore "$dir/clean" "$n"
rm -rf "$dir/clean"

echo "== $n objects, kill -9 with the whole index in one journal, restore"
"$bin" crash-fill "$dir/crash" "$n" 4 512 > "$dir/crash.log" &
child=$!
until grep -q ready "$dir/crash.log" 2>/dev/null; do sleep 1; done
kill -9 "$child"; wait "$child" 2>/dev/null || true; child=
head -1 "$dir/crash.log"
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "(page cache dropped)" || true
"$bin" restore "$dir/crash" "$n"
echo "== restore again (after the snapshot the previous restore wrote)"
"$bin" restore "$dir/crash" "$n"
