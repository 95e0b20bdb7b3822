#!/usr/bin/env bash
# run.sh — benchmark linerate against nginx, one server core each, on 127.0.0.1.
#
# What it owns: the set-up around bench/bench.py — build the release binaries, install
# nginx from Debian packages when it is missing, raise the file-descriptor limit for the
# 10,000-connection idle workload, then run the benchmark and kill whatever is left on
# exit. What it does not do: measure anything itself (bench.py does), or talk to any
# address but 127.0.0.1.
#
# Usage:
#   bench/run.sh                 full run: 5 workloads x 3 rounds x 2 servers (~7 min)
#   bench/run.sh --quick         smoke run: 1 round of 2 s per workload (~1 min)
#   bench/run.sh --servers nginx --workloads small,large,generator
#   bench/run.sh --help          every option (they are bench.py's)
#
# Results: a Markdown table on stdout, every run in $WORKDIR/results.json
# (default /var/tmp/linerate-bench). Needs 2+ CPUs (server on CPU 0, load on CPU 1),
# ~1.6 GB of disk for content, python3 >= 3.9. Figures are only meaningful on an
# otherwise idle machine: bench.py reports the "other load" seen during each run.

set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

want_linerate=1
for arg in "$@"; do
    case "$arg" in
        -h|--help) exec python3 bench/bench.py --help ;;
    esac
done
# `--servers nginx` (either spelling) means the linerate server is not needed.
prev=""
for arg in "$@"; do
    if [[ "$prev" == "--servers" && "$arg" != *linerate* ]] || [[ "$arg" == --servers=* && "$arg" != *linerate* ]]; then
        want_linerate=0
    fi
    prev="$arg"
done

# Every process this script (or bench.py) starts is killed on exit. bench.py cleans up
# after itself on normal exit, Ctrl-C and SIGTERM; this covers bench.py being killed.
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

# nginx from Debian packages when missing (needs root; nginx-light is enough).
if ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
    echo "[bench] installing nginx" >&2
    apt-get update -qq && apt-get install -y -qq nginx-light >/dev/null \
        || apt-get install -y -qq nginx >/dev/null
fi
# The nginx package starts a system service on port 80 on some systems; we never use it
# and do not touch it.

echo "[bench] building release binaries" >&2
cargo build --release -p linerate-bench --example bench
if ! cargo build --release -p linerate; then
    if [[ "$want_linerate" == 1 ]]; then
        echo "[bench] linerate does not build; run with --servers nginx to bench nginx alone" >&2
        exit 1
    fi
    echo "[bench] linerate does not build; continuing with nginx only" >&2
fi

# 10,000 idle connections need ~10,100 descriptors in the generator and in the server.
# Raise the soft limit as far as the hard limit allows (root may raise the hard one).
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if (( $(ulimit -n) < 10300 )); then
    echo "[bench] warning: open-file limit $(ulimit -n) is below what 10,000 idle connections need" >&2
fi

python3 bench/bench.py "$@" &
py_pid=$!
wait "$py_pid"
status=$?
py_pid=""
exit "$status"
