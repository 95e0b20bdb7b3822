#!/usr/bin/env bash
# cluster.sh — cluster hit ratio and origin offload: 3 linerate nodes with [cluster]
# (rendezvous placement, one hop to the owner) versus 3 nginx nodes with
# `upstream { hash $uri consistent; }` to an owner tier with proxy_cache, on the same
# 3 network namespaces, the same origin, the same request mix, in one run.
#
# Topology (created here, deleted on exit; needs root and iproute2): a hub namespace
# with a bridge; one namespace per node (10.77.0.1-3); the origin (nginx serving
# generated files, `expires 1h`, access log = origin request count) and the client in
# this namespace on 10.77.0.254.
#
# nginx nodes: a front server on :8080 (proxy_cache, then `hash $uri consistent` over
# the three owner servers) and an owner server on :8081 (proxy_cache, to the origin);
# proxy_cache_lock on both (single flight). So nginx also keeps a copy at the node a
# client asked, as linerate does (a non-owner stores what it fetched from the owner).
#
# The mix: REQUESTS GETs, Zipf(s = ZIPF_S) over OBJECTS objects of OBJECT_KB KiB, each
# to a random node (fixed seed: both servers see the same sequence), CONCURRENCY
# client threads with keep-alive. Reported per server: req/s, MB/s, origin requests,
# offload (1 - origin requests / requests), cluster hit ratio (requests answered
# without an origin request = offload; the mix's cold floor is OBJECTS distinct keys).
#
#   bench/cluster.sh
#   REQUESTS=20000 OBJECTS=2000 bench/cluster.sh
#   LINERATE=target/debug/linerate bench/cluster.sh
#   LOAD_FACTOR=100 bench/cluster.sh     # bounded load off, in effect
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=${REQUESTS:-6000}
OBJECTS=${OBJECTS:-500}
OBJECT_KB=${OBJECT_KB:-256}
ZIPF_S=${ZIPF_S:-1.0}
CONCURRENCY=${CONCURRENCY:-16}
LOAD_FACTOR=${LOAD_FACTOR:-1.25}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
LINERATE=${LINERATE:-}
[ "$(id -u)" = 0 ] || { echo "[cluster] needs root (network namespaces)" >&2; exit 1; }
for t in ip python3 "$NGINX"; do
    command -v "$t" >/dev/null || { echo "[cluster] missing $t" >&2; exit 1; }
done
if [ -z "$LINERATE" ]; then
    echo "[cluster] building linerate (release)" >&2
    cargo build --release -q -p linerate --bin linerate
    LINERATE=target/release/linerate
fi
LINERATE=$(realpath "$LINERATE")

tag="lrb$$"
prefix=10.77.0
work=$(mktemp -d /tmp/linerate-cluster.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for i in 1 2 3; do ip netns pids "${tag}n$i" 2>/dev/null | xargs -r kill 2>/dev/null || true; done
    for i in 1 2 3; do ip netns del "${tag}n$i" 2>/dev/null || true; done
    ip netns del "${tag}h" 2>/dev/null || true
    ip link del "${tag}o" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# --- network -------------------------------------------------------------------
ip netns add "${tag}h"
ip -n "${tag}h" link add br0 type bridge
ip -n "${tag}h" link set br0 up
ip link add "${tag}o" type veth peer name o0 netns "${tag}h"
ip -n "${tag}h" link set o0 master br0 up
ip addr add "$prefix.254/24" dev "${tag}o"
ip link set "${tag}o" up
for i in 1 2 3; do
    ns="${tag}n$i"
    ip netns add "$ns"
    ip -n "${tag}h" link add "p$i" type veth peer name eth0 netns "$ns"
    ip -n "${tag}h" link set "p$i" master br0 up
    ip -n "$ns" addr add "$prefix.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
done

# --- origin --------------------------------------------------------------------
mkdir -p "$work/content/v" "$work/origin"
python3 - "$work/content/v" "$OBJECTS" "$OBJECT_KB" <<'EOF'
import os, sys
d, n, kb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    with open(os.path.join(d, f"o{i}.m4s"), "wb") as f:
        f.write(os.urandom(kb * 1024))
EOF
chmod -R a+rX "$work"
cat >"$work/origin/nginx.conf" <<EOF
worker_processes 1;
pid $work/origin/nginx.pid;
error_log $work/origin/error.log;
events { worker_connections 4096; }
http {
    access_log $work/origin/access.log;
    sendfile on;
    server {
        listen $prefix.254:8000;
        root $work/content;
        expires 1h;
    }
}
EOF
"$NGINX" -c "$work/origin/nginx.conf" -g 'daemon off;' &
pids+=($!)

origin_count() { wc -l <"$work/origin/access.log" 2>/dev/null || echo 0; }
wait_port() { # ns host port
    for _ in $(seq 100); do
        if ip netns exec "$1" python3 -c "import socket,sys; socket.create_connection(('$2',$3),0.2)" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "[cluster] nothing listens on $2:$3" >&2; exit 1
}

# --- the client ----------------------------------------------------------------
cat >"$work/client.py" <<'EOF'
import http.client, json, random, sys, threading, time
nodes, requests, objects, s, conc = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
rng = random.Random(42)
weights = [1.0 / (k + 1) ** s for k in range(objects)]
keys = rng.choices(range(objects), weights=weights, k=requests)
targets = [rng.randrange(len(nodes)) for _ in range(requests)]
work = list(zip(keys, targets))
lock = threading.Lock()
errors, nbytes, pos = [0], [0], [0]
def run():
    conns = {}
    while True:
        with lock:
            if pos[0] >= len(work):
                return
            k, t = work[pos[0]]
            pos[0] += 1
        for attempt in range(2):
            c = conns.get(t) or http.client.HTTPConnection(nodes[t], 8080, timeout=30)
            conns[t] = c
            try:
                c.request("GET", f"/v/o{k}.m4s", headers={"Host": "video.test"})
                r = c.getresponse()
                body = r.read()
                with lock:
                    nbytes[0] += len(body)
                    if r.status != 200:
                        errors[0] += 1
                break
            except Exception:
                c.close()
                conns.pop(t, None)
                if attempt:
                    with lock:
                        errors[0] += 1
t0 = time.time()
ts = [threading.Thread(target=run) for _ in range(conc)]
[t.start() for t in ts]
[t.join() for t in ts]
dt = time.time() - t0
print(json.dumps({"seconds": dt, "errors": errors[0], "bytes": nbytes[0], "distinct": len(set(keys))}))
EOF

run_mix() { # label
    local before after out
    before=$(origin_count)
    out=$(python3 "$work/client.py" "$prefix.1,$prefix.2,$prefix.3" "$REQUESTS" "$OBJECTS" "$ZIPF_S" "$CONCURRENCY")
    sleep 0.5
    after=$(origin_count)
    python3 - "$1" "$out" "$((after - before))" "$REQUESTS" <<'EOF'
import json, sys
label, r, origin, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(f"| {label} | {n / r['seconds']:.0f} | {r['bytes'] / r['seconds'] / 1e6:.0f} | {origin} | {r['distinct']} | {100 * (1 - origin / n):.2f} % | {r['errors']} |")
EOF
}

echo "Mix: $REQUESTS requests, Zipf s=$ZIPF_S over $OBJECTS objects of $OBJECT_KB KiB, random node, $CONCURRENCY clients"
echo
echo "| server | req/s | MB/s | origin requests | distinct objects asked | offload (cluster hit ratio) | errors |"
echo "|---|---|---|---|---|---|---|"

# --- linerate cluster ----------------------------------------------------------
peers="$work/peers"
for i in 1 2 3; do echo "n$i $prefix.$i:8080"; done >"$peers"
# The shared secret that authenticates peer requests (required with [cluster]).
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/cluster.key"
for i in 1 2 3; do
    mkdir -p "$work/lr$i"
    cat >"$work/lr$i/linerate.toml" <<EOF
[server]
listen = ["$prefix.$i:8080"]
workers = 1
[admin]
listen = "$prefix.$i:9090"
[cache]
durability = "no_sync"
cache_name = "n$i"
[[cache.disk]]
name = "d0"
path = "$work/lr$i/cache"
max_bytes = 4294967296
[[origin]]
name = "o"
servers = ["http://$prefix.254:8000"]
[[route]]
path_prefix = "/"
origin = "o"
[cluster]
self = "n$i"
peers_file = "$peers"
secret_file = "$work/cluster.key"
load_factor = $LOAD_FACTOR
EOF
    ip netns exec "${tag}n$i" "$LINERATE" serve --config "$work/lr$i/linerate.toml" 2>"$work/lr$i/log" &
    pids+=($!)
done
for i in 1 2 3; do wait_port "${tag}n$i" "$prefix.$i" 8080; done
run_mix "linerate [cluster]"
for i in 1 2 3; do ip netns pids "${tag}n$i" | xargs -r kill; done
sleep 0.5

# --- nginx hash $uri consistent ------------------------------------------------
for i in 1 2 3; do
    d="$work/ng$i"
    mkdir -p "$d/front" "$d/owner" "$d/tmp"
    chmod -R a+rwX "$d"
    cat >"$d/nginx.conf" <<EOF
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    proxy_temp_path $d/tmp;
    proxy_cache_path $d/front levels=1:2 keys_zone=front:64m max_size=4g inactive=1h;
    proxy_cache_path $d/owner levels=1:2 keys_zone=owner:64m max_size=4g inactive=1h;
    upstream owners {
        hash \$uri consistent;
        server $prefix.1:8081;
        server $prefix.2:8081;
        server $prefix.3:8081;
        keepalive 32;
    }
    upstream origin { server $prefix.254:8000; keepalive 32; }
    server {
        listen $prefix.$i:8080;
        location / {
            proxy_cache front;
            proxy_cache_lock on;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_pass http://owners;
        }
    }
    server {
        listen $prefix.$i:8081;
        location / {
            proxy_cache owner;
            proxy_cache_lock on;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_pass http://origin;
        }
    }
}
EOF
    ip netns exec "${tag}n$i" "$NGINX" -c "$d/nginx.conf" -g 'daemon off;' &
    pids+=($!)
done
for i in 1 2 3; do wait_port "${tag}n$i" "$prefix.$i" 8080; done
run_mix "nginx hash \$uri consistent"
