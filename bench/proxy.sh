#!/usr/bin/env bash
# proxy.sh — benchmark cache (proxy) mode: linerate versus nginx proxy_cache + slice,
# in front of the same nginx origin, one server core each, on 127.0.0.1.
#
# What it owns: the set-up around bench/proxy.py — build the release binaries, install
# nginx from Debian packages when it is missing, raise the file-descriptor limit, then
# run the benchmark and kill whatever is left on exit. bench/proxy.py does the
# measuring; see docs/benchmarks.md, "Proxy mode". Tests (--tests, all by default):
#   warm        warm-hit throughput and CPU per GB on the 200 x 2 MiB objects, 16 conns
#   warm-small  the same on the 2,000 x 64 KiB objects, 64 conns (per-request cost)
#   miss-small  every request a new URL (64 KiB objects, 50 conns): fetch, store, send
#   miss-large  the same on the 2 MiB objects, 16 conns
#   miss-huge   the same on 8 x 64 MiB objects, 8 conns: 64 origin requests (1 MiB
#               slices) per request; files written on first use
#   (every miss round starts from empty caches after a `sync`, counts the object files
#   each server stored per request, and removes both caches after it: a round stores GBs)
#   herd        200 clients at once on one uncached 2 MiB object
#   range       a 1 KiB range deep in an uncached 1 GiB object
# Warm-hit tests fill both caches first (two passes; the second must not reach the
# origin) and count origin requests during the measured window (must be 0).
#
# Usage:
#   bench/proxy.sh                        3 rounds of each test, both servers (~7 min,
#                                         and ~1 more for miss-huge)
#   bench/proxy.sh --quick                1 round, 2 s throughput runs (~1.5 min)
#   bench/proxy.sh --servers nginx        nginx alone (linerate cache mode not needed)
#   bench/proxy.sh --tests warm,warm-small   some tests only
#   bench/proxy.sh --wait-quiet 60 --retries 2   on a shared machine
#   bench/proxy.sh --help                 every option (they are proxy.py's)
#
# linerate runs in cache mode from a generated config file: one worker, 1 MiB slices
# like nginx's `slice 1m`, an ephemeral admin port; when that binary lacks cache mode
# the script says so, measures nginx alone and exits with status 2. nginx gets
# proxy_cache + slice 1m + proxy_cache_lock, and `open_file_cache max=1024` (which
# nginx applies to its cache files too; --nginx-open-file-cache 0 turns it off).
#
# Results: a Markdown table on stdout, every run in $WORKDIR/proxy-results.json
# (default /var/tmp/linerate-bench, content shared with bench/run.sh). Needs 2+ CPUs
# (proxy on CPU 0; load generator, clients and origin on CPU 1), ~1.6 GB of disk for
# content plus ~0.9 GB for the two caches (miss-huge: 0.5 GB more content, and up to
# one round's stores, ~64 MiB x req/s x duration, at most linerate's 8 GiB or nginx's
# 16 GiB cache limit, until the round ends), python3 >= 3.9.

set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

for arg in "$@"; do
    case "$arg" in
        -h|--help) exec python3 bench/proxy.py --help ;;
    esac
done
want_linerate=1
prev=""
for arg in "$@"; do
    if [[ "$prev" == "--servers" && "$arg" != *linerate* ]] || [[ "$arg" == --servers=* && "$arg" != *linerate* ]]; then
        want_linerate=0
    fi
    prev="$arg"
done

# Every process this script (or proxy.py) starts is killed on exit. proxy.py cleans up
# after itself on normal exit, Ctrl-C and SIGTERM; this covers proxy.py being killed.
py_pid=""
cleanup() {
    if [[ -n "$py_pid" ]] && kill -0 "$py_pid" 2>/dev/null; then
        kill -TERM "$py_pid" 2>/dev/null || true
        wait "$py_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# nginx from Debian packages when missing (needs root; nginx-light has the slice module
# only in some releases, so the full package is the fallback).
if ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
    echo "[proxy] installing nginx" >&2
    apt-get update -qq && apt-get install -y -qq nginx-light >/dev/null \
        || apt-get install -y -qq nginx >/dev/null
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
if ! "$nginx_bin" -V 2>&1 | grep -q http_slice_module; then
    echo "[proxy] $nginx_bin lacks the slice module (http_slice_module); install the 'nginx' package" >&2
    exit 1
fi

echo "[proxy] building release binaries" >&2
cargo build --release -p linerate-bench --example bench
if ! cargo build --release -p linerate; then
    if [[ "$want_linerate" == 1 ]]; then
        echo "[proxy] linerate does not build; run with --servers nginx to bench nginx alone" >&2
        exit 1
    fi
    echo "[proxy] linerate does not build; continuing with nginx only" >&2
fi

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

python3 bench/proxy.py "$@" &
py_pid=$!
set +e
wait "$py_pid"
status=$?
set -e
py_pid=""
exit "$status"
