#!/usr/bin/env bash
# zipf.sh — a Zipf-popular library larger than the server's memory (appliance and cache
# mode), and the cold mix on a throttled disk: linerate against nginx with `aio threads`
# (issue 20, parts 3 and 4), one server core each, on 127.0.0.1.
#
# What it owns: the set-up around bench/zipf.py — build the release binaries, install
# nginx from Debian packages when it is missing, check for cgroup v1 (memory and blkio)
# and root, raise the file-descriptor limit, then run the benchmark and kill whatever
# is left on exit. bench/zipf.py does the measuring; see docs/benchmarks.md, "Library
# larger than memory (issue 20)" and "Slow disk (issue 20)".
#
# Usage:
#   bench/zipf.sh                                  all three tests, 3 rounds (~15 min)
#   bench/zipf.sh --tests appliance --rounds 1     one test
#   bench/zipf.sh --wait-quiet 120 --retries 1     on a shared machine
#   bench/zipf.sh --tests appliance,cache --servers nginx-aio,linerate,kernel-sendfile,kernel-pipe
#                                                  with the kernel's work alone beside them
#                                                  (bench/kernel-server.c, built with gcc)
#   bench/zipf.sh --help                           every option (they are zipf.py's)
#
# Content (~3.9 GB: the 3.4 GiB library and 0.5 GB for the slow-disk test) is written
# once under /var/tmp/linerate-bench/zipf and reused; the cache test writes both caches
# (~3.4 GB each) under it and removes them at the end. Remove the directory when done.
# Needs root (cgroups), 2+ CPUs, python3 >= 3.9.

set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

for arg in "$@"; do
    case "$arg" in
        -h|--help) exec python3 bench/zipf.py --help ;;
    esac
done

for c in memory blkio; do
    if [[ ! -w /sys/fs/cgroup/$c ]]; then
        echo "[zipf] needs cgroup v1 '$c' mounted at /sys/fs/cgroup/$c and root" >&2
        exit 1
    fi
done

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

if ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
    echo "[zipf] installing nginx" >&2
    apt-get update -qq && apt-get install -y -qq nginx-light >/dev/null \
        || apt-get install -y -qq nginx >/dev/null
fi

echo "[zipf] building release binaries" >&2
cargo build --release -p linerate -p linerate-bench

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

python3 bench/zipf.py "$@" &
py_pid=$!
set +e
wait "$py_pid"
status=$?
set -e
py_pid=""
exit "$status"
