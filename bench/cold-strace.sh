#!/bin/bash
# The `cold` workload by hand (16 connections on the hot 64 KiB files, 4 on the 2 MiB
# files, which are evicted every 100 ms), with `strace -T -e trace=sendfile` on the
# worker thread for 3 s and a /metrics scrape at the end: how long the event loop sat in
# sendfile, and the stall and disk-pool counters (issue 20). Needs the content bench.py
# writes (run it once), strace and curl. Usage: bench/cold-strace.sh BIN LABEL
set -u
BIN=$1; LABEL=$2; PORT=$((20000 + RANDOM % 10000)); APORT=$((PORT + 1))
ROOT=${ROOT:-/var/tmp/linerate-bench/root}  # bench.py's content
GEN=${GEN:-target/release/linerate}
OUT=${OUTDIR:-/var/tmp/linerate-bench}/cold-strace-$LABEL
CONF=$OUT.toml
printf '[server]\nlisten = ["127.0.0.1:%s"]\nworkers = 1\n[appliance]\nroot = "%s"\n[admin]\nlisten = "127.0.0.1:%s"\n' $PORT $ROOT $APORT > $CONF
taskset -c 0 $BIN serve --config $CONF >$OUT.server.log 2>&1 &
SPID=$!
sleep 1
TID=$(ps -T -p $SPID -o spid=,comm= | awk '$2 ~ /w0/ {print $1; exit}')
taskset -c 1 python3 - <<PY &
import os, time, glob
files = sorted(glob.glob("$ROOT/large/*.bin"))
end = time.time() + 9
while time.time() < end:
    for f in files:
        fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
    time.sleep(0.1)
PY
EPID=$!
taskset -c 1 $GEN bench --target 127.0.0.1:$PORT --workload files --prefix /small/ --count 2000 --suffix .bin --connections 16 --duration 6s --warmup 1s > $OUT.hot.txt 2>&1 &
H=$!
taskset -c 1 $GEN bench --target 127.0.0.1:$PORT --workload files --prefix /large/ --count 200 --suffix .bin --connections 4 --duration 6s --warmup 1s > $OUT.cold.txt 2>&1 &
C=$!
sleep 2.5
timeout -s INT 3 strace -T -e trace=sendfile -p $TID -o $OUT.strace >/dev/null 2>&1
wait $H $C $EPID
curl -s -H "Host: 127.0.0.1:$APORT" http://127.0.0.1:$APORT/metrics | grep -E "^linerate_(worker_stall|worker_stalls|disk_pool|loop_file_io_seconds_(sum|count))" > $OUT.metrics
kill $SPID; wait $SPID 2>/dev/null
python3 - <<PY
import re
calls=0; slow=0; total=0.0
for l in open("$OUT.strace"):
    m = re.search(r"<([0-9.]+)>\s*$", l)
    if m and l.startswith("sendfile"):
        d=float(m.group(1)); calls+=1; total+=d; slow+= d>0.001
print(f"== $LABEL: worker sendfile calls in 3 s: {calls}, total {total:.3f} s, over 1 ms: {slow}")
PY
cat $OUT.metrics; grep -hiE "req/s|requests_per_s|p99" $OUT.hot.txt $OUT.cold.txt | head -6
