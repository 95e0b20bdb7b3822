#!/bin/bash
# Where the cache worker's time goes on 64 KiB misses (issue 21): runs bench/proxy.py's
# miss-small test against linerate alone and, 3 s into it, `perf trace -s` on the
# worker thread (linerate-w0) for 3 s: calls, total, min/avg/max milliseconds per
# system call. Tracing slows the run; compare the durations, not the rate.
# Needs perf, nginx, python3 and bench.py's content (bench/proxy.sh once); root for
# the scheduler setting (restored). Talks to 127.0.0.1 only; proxy.py stops what it
# starts.
# Usage: bench/miss-trace.sh BIN [durability]   e.g. bench/miss-trace.sh target/release/linerate no_sync
set -u
cd "$(dirname "$0")/.."
BIN=$1; DUR=${2:-}
extra=(); [ -n "$DUR" ] && extra=(--durability "$DUR")
sysctl -qw kernel.sched_autogroup_enabled=0
python3 bench/proxy.py --tests miss-small --servers linerate --linerate "$BIN" "${extra[@]}" \
    --rounds 1 --duration 10 > /tmp/miss-trace.log 2>&1 &
run=$!
pid=""
for _ in $(seq 1 600); do
    pid=$(pgrep -f " serve --config" | head -1); gen=$(pgrep -f "unique" | head -1)
    [ -n "$pid" ] && [ -n "$gen" ] && break
    sleep 0.1
done
sleep 3
worker=$(for t in /proc/"$pid"/task/*; do [ "$(cat "$t/comm")" = linerate-w0 ] && basename "$t"; done | head -1)
timeout -s INT 3 perf trace -s -t "${worker:-$pid}" 2>&1 | sed -n '/Summary/,$p' | head -30
wait $run
grep -E "\[proxy\] miss-small" /tmp/miss-trace.log
sysctl -qw kernel.sched_autogroup_enabled=1
