#!/bin/bash
# System calls per cache miss (issue 21): an nginx origin serving bench.py's 64 KiB
# files, linerate in cache mode in front of it (one worker, the config bench/proxy.py
# uses), N sequential misses (every URL new: `?u=`) on one keep-alive connection, and
# `strace -c -f` on every linerate thread for exactly those requests. Prints the
# syscall table and the calls per miss. Needs the content bench.py writes (run
# bench/proxy.sh once), nginx and strace. Talks to 127.0.0.1 only; stops what it starts.
# Usage: bench/miss-strace.sh BIN LABEL [N=400] [extra linerate config lines for [cache]]
set -u
BIN=$1; LABEL=$2; N=${3:-400}; EXTRA=${4:-}
ROOT=${ROOT:-/var/tmp/linerate-bench/root}
OUT=${OUTDIR:-/var/tmp/linerate-bench}/miss-strace-$LABEL
rm -rf "$OUT"; mkdir -p "$OUT/cache" "$OUT/origin"
# A cache that has been running has its 4,096 fan-out directories (objects/000..fff);
# a fresh one makes each on first use, once (one mkdir per miss for the first few
# thousand misses). Counted here: the steady state.
mkdir -p "$OUT/cache/objects"
(cd "$OUT/cache/objects" && printf '%03x\n' $(seq 0 4095) | xargs mkdir)
OPORT=$((20000 + RANDOM % 10000)); PORT=$((OPORT + 1)); APORT=$((OPORT + 2))
cat > "$OUT/origin/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $OUT/origin/nginx.pid; error_log $OUT/origin/error.log warn;
events { worker_connections 1024; }
http { access_log off; sendfile on; keepalive_requests 1000000;
  client_body_temp_path $OUT/origin; proxy_temp_path $OUT/origin; fastcgi_temp_path $OUT/origin;
  uwsgi_temp_path $OUT/origin; scgi_temp_path $OUT/origin;
  server { listen 127.0.0.1:$OPORT; root $ROOT; } }
CONF
taskset -c 1 nginx -c "$OUT/origin/nginx.conf" -p "$OUT/origin" 2>"$OUT/origin/stderr.log" &
OPID=$!
printf '[server]\nlisten = ["127.0.0.1:%s"]\nworkers = 1\n[admin]\nlisten = "127.0.0.1:%s"\n[cache]\n%b\n[[cache.disk]]\nname = "d0"\npath = "%s"\nmax_bytes = %s\n[[origin]]\nname = "origin"\nservers = ["http://127.0.0.1:%s"]\n[[route]]\npath_prefix = "/"\norigin = "origin"\nslice_bytes = 1048576\ndefault_ttl_s = 3600\n' \
  $PORT $APORT "$EXTRA" "$OUT/cache" $((8 << 30)) $OPORT > "$OUT/linerate.toml"
taskset -c 0 "$BIN" serve --config "$OUT/linerate.toml" >"$OUT/server.log" 2>&1 &
SPID=$!
trap 'kill $SPID $OPID 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 50); do
  python3 -c "import socket;socket.create_connection(('127.0.0.1',$PORT),0.2).close();socket.create_connection(('127.0.0.1',$OPORT),0.2).close()" 2>/dev/null && break
  sleep 0.1
done
# Warm the path (the fan-out directories' first use, the origin connection) with a few
# misses first, then count exactly N.
cat > "$OUT/client.py" <<PY
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", $PORT)
def run(tag, n):
    for i in range(n):
        c.request("GET", f"/small/{i % 2000}.bin?u={tag}.{i}")
        r = c.getresponse(); b = r.read()
        assert r.status == 200 and len(b) == 65536, (r.status, len(b))
run("warm", 50)
sys.stdout.write("ready\n"); sys.stdout.flush(); sys.stdin.readline()
run("count", $N)
PY
coproc CLIENT { taskset -c 1 python3 "$OUT/client.py"; }
read -r line <&"${CLIENT[0]}"
# Default: in-kernel counters (perf stat on the syscall tracepoints, every thread
# together): no cost per call, so the worker's timing of its own writes (`DiskWrites`)
# sees what it sees untraced. STRACE_OPTS="-c" (or other strace options) uses strace
# instead, which slows every call enough to send the writes to the fill threads.
MODE=${STRACE_OPTS:-perf}
if [ "$MODE" = perf ]; then
  EVENTS=raw_syscalls:sys_enter; [ -n "${ONLY_TOTAL:-}" ] && CALLS="" || CALLS="futex epoll_wait write pwrite64 pwritev recvfrom sendto sendfile64 openat close rename fdatasync syncfs cachestat fcntl getpid fallocate mkdir"
  for c in $CALLS; do
    EVENTS="$EVENTS,syscalls:sys_enter_$c"
  done
  perf stat ${PERF_OPTS:-} -e "$EVENTS" -p $SPID -o "$OUT/strace.txt" &
  TPID=$!
  sleep 1
elif [ "$MODE" != none ]; then
  strace $MODE -f -p $SPID -o "$OUT/strace.txt" &
  TPID=$!
  sleep 1
fi
echo go >&"${CLIENT[1]}"
wait $CLIENT_PID
sleep 0.5
[ "$MODE" != none ] && { kill -INT $TPID; wait $TPID 2>/dev/null; }
# Where the fill writes ran and how the publishes were grouped.
curl -s "http://127.0.0.1:$APORT/metrics" -H "Host: 127.0.0.1:$APORT" \
  | grep -E '^linerate_cache_(fill_writes|fill_slow_writes|disk_publish_batches|disk_published|disk_behind)' || true
for t in /proc/$SPID/task/*; do echo "$(basename $t) $(cat $t/comm)"; done > "$OUT/threads.txt"
echo "== $LABEL: $N sequential 64 KiB misses, threads: $(ls /proc/$SPID/task | wc -l)"
[ "$MODE" = none ] && exit 0
cat "$OUT/strace.txt"
if [ "$MODE" = perf ]; then
  awk -v n=$N '$2 ~ /^(raw_)?syscalls:sys_enter/ {gsub(",", "", $1); name=$2; sub(".*sys_enter_?", "", name); if (name=="") name="ALL"; printf "%-12s %6.2f per miss\n", name, $1/n}' "$OUT/strace.txt"
else
  awk -v n=$N '$NF=="total" {printf "== %.1f system calls per miss\n", $4/n}' "$OUT/strace.txt"
fi
