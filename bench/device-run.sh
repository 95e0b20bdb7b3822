#!/bin/bash
# bench/device-run.sh — the quiet-machine run behind docs/benchmarks.md "Issue 13 on a
# quiet 16-core machine": appliance `small` (seg64k) with four servers (nginx with an
# open-file cache as large as linerate's, nginx as shipped, linerate, a base linerate
# binary), then cache mode's warm hits for the new and the base binary, each vs nginx.
#
# It runs self-contained binaries from a directory D (default .devbench/) so it works on
# a machine without Rust, nginx or Debian's libraries: D/nginx, D/linerate-new and
# D/linerate-old are wrappers that start D/*.bin through the dynamic loader and the
# libraries copied into D/lib (how that directory was made: see the docs section).
# Needs python3 and taskset there. Server on CPU 2, load on the next CPU that is not
# its hyperthread sibling. Env: R (rounds, 3), DUR (seconds, 5), TESTS (proxy tests,
# warm-small,warm), OUT (results dir). Usage: bench/device-run.sh [quick]
set -u
cd "$(dirname "$0")/.."
D=${D:-$PWD/.devbench}
OUT=${OUT:-/tmp/devout}; mkdir -p "$OUT"
command -v python3 >/dev/null || { echo "NO PYTHON3"; exit 3; }
command -v taskset >/dev/null || { echo "NO TASKSET"; exit 3; }
ulimit -n 65536 2>/dev/null || ulimit -n $(ulimit -Hn)
mkdir -p /var/log/nginx /var/lib/nginx
n=$(nproc)
if [ "$n" -ge 4 ]; then
  S=2
  sib=$(cat /sys/devices/system/cpu/cpu$S/topology/thread_siblings_list 2>/dev/null || echo $S)
  C=""
  for c in $(seq 3 $((n-1))); do
    s2=$(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null || echo $c)
    if [ "$s2" != "$sib" ]; then C=$c; break; fi
  done
else S=0; C=1; fi
echo "cpus $n server $S (siblings ${sib:-}) client $C"; uname -r; lscpu | grep -E "Model name|Thread|Socket" ; python3 --version
R=${R:-3}; DUR=${DUR:-5}
if [ "${1:-}" = quick ]; then R=1; DUR=1; fi
W=/tmp/lrbench; mkdir -p $W
python3 bench/bench.py --workloads small --servers nginx,nginx-stock,linerate,linerate-base \
  --linerate $D/linerate-new --linerate-base $D/linerate-old --nginx $D/nginx \
  --rounds $R --duration $DUR --server-cpu $S --client-cpu $C --workdir $W --out $OUT/appliance.json 2>&1 | tee $OUT/appliance.txt | grep -v "^\[bench\] small r" | tail -12
for b in new old; do
  python3 bench/proxy.py --tests ${TESTS:-warm-small,warm} --servers nginx,linerate --linerate $D/linerate-$b --nginx $D/nginx \
    --rounds $R --duration $DUR --server-cpu $S --client-cpu $C --workdir $W --out $OUT/proxy-$b.json 2>&1 | tee $OUT/proxy-$b.txt | tail -30
done
