#!/usr/bin/env bash
# https.sh — HTTPS throughput: linerate versus nginx, same certificate, same cipher,
# one server core each (taskset), wrk on the other core, 127.0.0.1 only.
#
# On a kernel without kTLS (CONFIG_TLS unset, as on the build machines) both servers
# encrypt in user space: linerate with rustls (ring), nginx with OpenSSL. The cipher is
# pinned to TLS 1.3 AES-256-GCM on both (nginx: ssl_conf_command Ciphersuites;
# linerate: its server preference, AES-256-GCM first) and checked with openssl s_client.
# Reports requests/s, GB/s and server CPU seconds per GB (utime+stime from /proc) for
# 64 KiB and 2 MiB segments. Kernel-TLS versus user-space figures come from inside the
# kTLS VM instead (scripts/ktls-vm-test.sh prints them; relative only).
#
#   bench/https.sh                      # 10 s per run
#   DURATION=30 CONNS=32 bench/https.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10}
CONNS=${CONNS:-16}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
for t in wrk openssl taskset "$NGINX"; do
    command -v "$t" >/dev/null || { echo "[https] missing $t" >&2; exit 1; }
done

echo "[https] building linerate (release)" >&2
cargo build --release -q -p linerate --bin linerate
LINERATE=target/release/linerate

work=$(mktemp -d /tmp/linerate-https.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/root" "$work/nginx/tmp"
head -c $((64 * 1024)) /dev/urandom >"$work/root/seg64k.m4s"
head -c $((2 * 1024 * 1024)) /dev/urandom >"$work/root/seg2m.m4s"
# Bring both into the page cache: a disk read would measure the disk.
cat "$work/root/"* >/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost \
    -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

# nginx's workers drop root privileges; let them read the library.
chmod -R a+rX "$work"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
LR_PORT=$(free_port)
NG_PORT=$(free_port)

cat >"$work/linerate.toml" <<EOF
[server]
listen = ["127.0.0.1:$(free_port)"]
workers = 1
[appliance]
root = "$work/root"
[admin]
listen = "off"
[tls]
listen = ["127.0.0.1:$LR_PORT"]
[[tls.certificates]]
chain = "$work/cert.pem"
key = "$work/key.pem"
names = ["localhost"]
EOF
cat >"$work/nginx.conf" <<EOF
worker_processes 1;
daemon off;
master_process on;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; multi_accept on; }
http {
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 600s;
    default_type application/octet-stream;
    client_body_temp_path $work/nginx/tmp;
    proxy_temp_path $work/nginx/tmp;
    fastcgi_temp_path $work/nginx/tmp;
    uwsgi_temp_path $work/nginx/tmp;
    scgi_temp_path $work/nginx/tmp;
    ssl_protocols TLSv1.3;
    ssl_conf_command Ciphersuites TLS_AES_256_GCM_SHA384;
    ssl_session_tickets on;
    server {
        listen 127.0.0.1:$NG_PORT ssl backlog=4096;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        root $work/root;
    }
}
EOF

taskset -c "$SERVER_CPU" "$LINERATE" serve --config "$work/linerate.toml" 2>"$work/linerate.log" &
pids+=($!)
LR_PID=$!
taskset -c "$SERVER_CPU" "$NGINX" -c "$work/nginx.conf" -p "$work/nginx" 2>"$work/nginx.err" &
pids+=($!)
sleep 1

# The servers' CPU ticks (nginx: master and its worker).
ticks() {
    local total=0 p
    for p in "$@"; do
        [ -r "/proc/$p/stat" ] || continue
        total=$((total + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat")))
    done
    echo "$total"
}
nginx_pids() { echo "$(cat "$work/nginx/nginx.pid") $(pgrep -P "$(cat "$work/nginx/nginx.pid")" | tr '\n' ' ')"; }

cipher() {
    echo | openssl s_client -connect "127.0.0.1:$1" -servername localhost 2>/dev/null |
        sed -n 's/^.*Cipher is \(.*\)$/\1/p' | head -n 1
}
echo "[https] cipher: linerate $(cipher "$LR_PORT"), nginx $(cipher "$NG_PORT")" >&2
# Both must serve the bytes, or the figures mean nothing.
for port in "$LR_PORT" "$NG_PORT"; do
    for seg in seg64k.m4s seg2m.m4s; do
        curl -sk --http1.1 "https://localhost:$port/$seg" | cmp -s - "$work/root/$seg" ||
            { echo "[https] port $port does not serve $seg correctly" >&2; cat "$work/nginx.err" "$work/nginx/error.log" >&2 2>/dev/null; exit 1; }
    done
done

hz=$(getconf CLK_TCK)
printf '| server | segment | requests/s | GB/s | server CPU s per GB |\n|---|---|---:|---:|---:|\n'
for seg in seg64k.m4s seg2m.m4s; do
    for server in nginx linerate; do
        if [ "$server" = nginx ]; then port=$NG_PORT; sp=$(nginx_pids); else port=$LR_PORT; sp=$LR_PID; fi
        # shellcheck disable=SC2086
        t0=$(ticks $sp)
        out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" "https://localhost:$port/$seg" 2>&1)
        # shellcheck disable=SC2086
        t1=$(ticks $sp)
        if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
            echo "[https] $server $seg: $(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr -s ' ')" >&2
        fi
        rps=$(sed -n 's/^Requests\/sec: *//p' <<<"$out")
        reqs=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' <<<"$out")
        size=$(stat -c %s "$work/root/$seg")
        awk -v s="$server" -v g="$seg" -v rps="$rps" -v n="$reqs" -v sz="$size" \
            -v d="$DURATION" -v cpu="$(( t1 - t0 ))" -v hz="$hz" 'BEGIN {
                gb = n * sz / 1e9
                printf "| %s | %s | %.0f | %.3f | %.2f |\n", s, g, rps, gb / d, (cpu / hz) / (gb > 0 ? gb : 1)
            }'
    done
done
