#!/usr/bin/env bash
# metrics-overhead.sh — does counting metrics cost linerate anything measurable?
#
# What it owns: an A/A/B comparison run through bench/bench.py. Three linerate
# configurations that differ only in `[admin] metrics`: "on-a" and "on-b" (identical,
# metrics on: their difference is the benchmark's own noise) and "off" (metrics off).
# Each round runs all three, one bench.py invocation each (server pinned to CPU 0,
# generator to CPU 1, as bench.py does), in an order rotated every round so that drift
# on the machine does not favour one of them. It then prints, per workload, the median
# and the range over rounds of on-b/on-a (noise) and off/on-a (effect) for req/s and
# server CPU-s/GB.
#
# What it does not do: build nginx or compare with it, install anything, or talk to any
# address but 127.0.0.1 (bench.py's rule). It stops nothing it did not start.
#
# Usage:
#   bench/metrics-overhead.sh                      4 rounds x 5 s, workloads small,large
#   ROUNDS=5 DURATION=10 bench/metrics-overhead.sh
#   WORKLOADS=small bench/metrics-overhead.sh
#
# Results: every run's JSON under $WORKDIR/metrics-overhead/ (default WORKDIR
# /var/tmp/linerate-bench, shared with run.sh so the content is reused).

set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

rounds="${ROUNDS:-4}"
duration="${DURATION:-5}"
warmup="${WARMUP:-1}"
workloads="${WORKLOADS:-small,large}"
workdir="${WORKDIR:-${TMPDIR:-/var/tmp}/linerate-bench}"
out="$workdir/metrics-overhead"
mkdir -p "$out"
rm -f "$out"/run-*.json

echo "[metrics-overhead] building release binaries" >&2
cargo build --release -p linerate-bench --example bench
cargo build --release -p linerate

# The admin API on an ephemeral port in every variant: the admin thread runs (and
# samples its rates once a second) in all three, so the only difference is the counting.
for variant in on-a on-b off; do
    metrics=true
    [[ "$variant" == off ]] && metrics=false
    printf '[admin]\nlisten = "127.0.0.1:0"\nmetrics = %s\n' "$metrics" > "$out/$variant.toml"
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

variants=(on-a on-b off)
for ((r = 0; r < rounds; r++)); do
    for ((i = 0; i < 3; i++)); do
        v="${variants[$(((i + r) % 3))]}"
        echo "[metrics-overhead] round $r: $v" >&2
        python3 bench/bench.py --servers linerate --linerate-config "$out/$v.toml" \
            --workloads "$workloads" --rounds 1 --duration "$duration" --warmup "$warmup" \
            --wait-quiet 120 --retries 2 --workdir "$workdir" \
            --out "$out/run-$r-$v.json" >/dev/null &
        py_pid=$!
        wait "$py_pid"
        py_pid=""
    done
done

python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
from pathlib import Path

out, rounds = Path(sys.argv[1]), int(sys.argv[2])
runs = {}
for r in range(rounds):
    for v in ("on-a", "on-b", "off"):
        for row in json.loads((out / f"run-{r}-{v}.json").read_text())["runs"]:
            runs[(r, v, row["workload"])] = row
workloads = sorted({w for (_, _, w) in runs}, key=["small", "large"].index)

def ratios(w, v, key):
    return [runs[(r, v, w)][key] / runs[(r, "on-a", w)][key] for r in range(rounds)]

def describe(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}–{max(xs):.3f})"

print(f"{rounds} rounds; median (min–max over rounds) of each ratio to on-a\n")
print("| workload | on-a req/s (median) | on-b/on-a req/s (noise) | off/on-a req/s | "
      "on-b/on-a CPU-s/GB (noise) | off/on-a CPU-s/GB | other load (max) |")
print("|---|---:|---:|---:|---:|---:|---:|")
verdicts = []
for w in workloads:
    base = statistics.median(runs[(r, "on-a", w)]["requests_per_s"] for r in range(rounds))
    other = max(runs[(r, v, w)]["other_load"] for r in range(rounds) for v in ("on-a", "on-b", "off"))
    cells = []
    for key in ("requests_per_s", "cpu_s_per_gb"):
        noise, effect = ratios(w, "on-b", key), ratios(w, "off", key)
        cells += [describe(noise), describe(effect)]
        bound = max(abs(x - 1) for x in noise)
        diff = abs(statistics.median(effect) - 1)
        verdicts.append(f"{w} {key}: |median(off/on-a) - 1| = {diff:.3f} "
                        f"{'<=' if diff <= bound else '>'} noise bound {bound:.3f} (largest |on-b/on-a - 1|)")
    print(f"| {w} | {base:.0f} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {other:.2f} |")
print()
for v in verdicts:
    print(v)
EOF
