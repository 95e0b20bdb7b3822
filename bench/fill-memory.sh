#!/usr/bin/env bash
# fill-memory.sh — what one large fill job costs: the server's memory for the job, and
# the bytes of job state written by one change (a pause). The figures in
# docs/operations.md ("Fill jobs", 1,000,000 URLs) come from this script.
#
# Usage: bench/fill-memory.sh BINARY [URLS]     (URLS: default 1000000)
# Starts BINARY in cache mode on 127.0.0.1 (an origin address nothing listens on, so
# and the job's fill window closed: it is only planned, never fetched), submits one job of URLS segment URLs with
# [fill] max_urls_per_job = URLS, reads VmRSS before and 2 s after, pauses the job and
# reads the process's written bytes (/proc/PID/io wchar) around the pause. Everything
# lives in a temporary directory removed at the end.
set -euo pipefail
BIN=$1
URLS=${2:-1000000}
D=$(mktemp -d /tmp/linerate-fill-memory.XXXX)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
TOKEN=fill-memory-token-0123456789abcdef
python3 -c "
import json, sys
n = int(sys.argv[1])
urls = ['/library/title-%04d/seg-%05d.ts' % (i // 1000, i % 1000) for i in range(n)]
# A window that is closed (but at 00:00 UTC): the job is planned and held, never fetched.
json.dump({'urls': urls, 'host': 'cdn.test', 'window': {'start': '00:00', 'end': '00:01'}}, open(sys.argv[2], 'w'))
" "$URLS" "$D/job.json"
cat >"$D/c.toml" <<EOT
[server]
listen = ["127.0.0.1:0"]
workers = 1
[cache]
durability = "no_sync"
[[cache.disk]]
name = "d0"
path = "$D/cache"
max_bytes = 1073741824
[[origin]]
name = "o"
servers = ["http://127.0.0.1:9"]
[[route]]
path_prefix = "/"
origin = "o"
[admin]
listen = "127.0.0.1:$PORT"
token = "$TOKEN"
[fill]
max_urls_per_job = $URLS
EOT
"$BIN" serve --config "$D/c.toml" 2>"$D/log" &
PID=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT/stats.json" && break; sleep 0.2; done
rss() { awk '/VmRSS/ {print $2}' "/proc/$PID/status"; }
wchar() { awk '/wchar/ {print $2}' "/proc/$PID/io"; }
R0=$(rss)
code=$(curl -s -o "$D/put.out" -w '%{http_code}' -X PUT -H "Authorization: Bearer $TOKEN" \
  --data-binary @"$D/job.json" "http://127.0.0.1:$PORT/fill/manifests/big")
sleep 2
R1=$(rss)
W0=$(wchar)
curl -s -o /dev/null -X POST -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/fill/jobs/big/pause"
sleep 0.5
W1=$(wchar)
echo "urls=$URLS submit=$code job_rss_MB=$(( (R1 - R0) / 1024 )) bytes_written_by_one_change=$((W1 - W0))"
