#!/usr/bin/env python3
"""proxy.py — cache (proxy) mode: linerate versus nginx proxy_cache, on 127.0.0.1.

What it owns: the procedure behind bench/proxy.sh (which builds the binaries, installs
nginx when missing and raises the fd limit, then calls this). An nginx ORIGIN serves
bench.py's generated content; in front of it, one at a time or side by side, run

  nginx     proxy_cache + proxy_cache_lock on + slice 1m (the usual nginx video edge)
  linerate  cache mode, one worker, 1 MiB slices (a generated config file)
  kernel, kernel-sync  the kernel's work of a miss alone (bench/kernel-cache.c, built
           here with gcc): a thread per connection that fetches each 1 MiB slice,
           writes it to a file, sends it from the same buffer and renames the file,
           at once (`kernel`, as nginx never flushes) or after a group flush
           (`kernel-sync`, linerate's `sync_before_publish`). Miss tests only: the
           limit a cache's misses are read against (`--servers
           nginx,linerate,kernel,kernel-sync`).

each pinned to the server CPU, with fresh (empty) caches at the start. Seven tests:

  warm     warm-hit throughput and server CPU per GB on the 2 MiB objects, both caches
           warmed first; the load generator (`linerate bench`, bench.py's measurement
           code) on the client CPU. The origin must see no request in the window.
  warm-small  the same on bench.py's 2,000 x 64 KiB objects (/small/, 64 connections
           as bench.py's "small"): per-request cost, not sendfile, dominates a hit.
  miss-small  every request a URL never asked before (`?u=SEED.N` on bench.py's
           64 KiB objects, 50 connections): each is an origin fetch, a store and a send.
           Reports req/s, CPU per GB, p99, each CPU's busy fraction (a saturated
           generator/origin core shows) and origin requests per request (want 1).
  miss-large  the same on the 2 MiB objects, 16 connections (2 origin requests each).
  miss-huge  the same on 8 x 64 MiB objects, 8 connections: 64 origin requests (1 MiB
           slices), 64 stored slices and a 64 MiB send per request. Its files are
           written on first use (WORKDIR/root/miss64m/); each server's cache is
           removed after each of its rounds (the server restarted empty), so the
           gigabytes a round stores do not pile up.
  herd     200 clients at once on one uncached 2 MiB object that the origin sends at
           ~20 MiB/s (~100 ms): origin requests (its access log), time for the whole
           herd, and each client's time to first byte relative to the origin's start.
  range    one `Range: bytes=700000000-700001023` deep inside an uncached 1 GiB object:
           time to first byte and bytes the origin sent for it ($body_bytes_sent).

Prints a Markdown table with linerate/nginx ratios; every run goes to
WORKDIR/proxy-results.json. Every process it starts is in its own session and is
killed on exit (also on Ctrl-C and SIGTERM). Talks to 127.0.0.1 only.

Standard library only (Python 3.11); reuses bench.py's content, /proc and generator code.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import selectors
import shutil
import signal
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as B  # noqa: E402  (bench.py: content, /proc sampling, generator, processes)

HOST = B.HOST
CLK_TCK = B.CLK_TCK

HERD_CLIENTS = 200
WARM_CONNECTIONS = B.CONNECTIONS["large"]  # 16
WARM_SMALL_CONNECTIONS = B.CONNECTIONS["small"]  # 64
ALL_TESTS = ["warm", "warm-small", "miss-small", "miss-large", "miss-huge", "herd", "range"]
# The kernel's work of a miss alone (bench/kernel-cache.c), by its durability argument.
KERNEL_SERVERS = {"kernel": "none", "kernel-sync": "sync"}
ALL_SERVERS = ["nginx", "linerate", *KERNEL_SERVERS]
# Each server's own URLs in a miss round (`?u=SEED.N`), so no server asks a URL another
# asked (it would be a hit at the origin's count, or a shared count).
SEED_OF_SERVER = {"linerate": 1, "nginx": 2, "kernel": 3, "kernel-sync": 4}
# Warm-hit tests: test name -> (path prefix, object count, connections, size label).
WARM_TESTS = {
    "warm": ("/large/", B.LARGE_COUNT, WARM_CONNECTIONS, "2 MiB"),
    "warm-small": ("/small/", B.SMALL_COUNT, WARM_SMALL_CONNECTIONS, "64 KiB"),
}
# Miss tests: every request a URL never asked before (`linerate bench --unique` appends
# `?u=SEED.N`; the origin serves the file by path), so each is fetch, store, serve.
# test name -> (path prefix, object count, connections, size label, origin requests per miss)
MISS_TESTS = {
    "miss-small": ("/small/", B.SMALL_COUNT, 50, "64 KiB", 1),
    "miss-large": ("/large/", B.LARGE_COUNT, 16, "2 MiB", 2),
    # 8 connections: enough to keep the cache core busy while the generator core (which
    # also runs the origin) stays about half idle.
    "miss-huge": ("/miss64m/", 8, 8, "64 MiB", 64),
}
# miss-huge's objects: bench.py's content has nothing between 2 MiB and 1 GiB, so
# proxy.py writes these itself, only when the test is asked for.
HUGE_MISS_DIR, HUGE_MISS_SIZE = "miss64m", 64 << 20
# Tests whose stored bytes are removed after each round (each round can store more
# gigabytes than the disk should keep): the server is stopped, its work directory
# (cache included) removed, and it is started again empty for the next round. All the
# miss tests: every round then starts alike for both servers (no eviction of the
# round's own objects from a cache filled by the rounds before, which linerate's
# policy does first to objects seen once, and no pages of earlier rounds to reclaim).
DROP_CACHE_AFTER_ROUND = set(MISS_TESTS)
# nginx's open-file cache for its cache files, as large as linerate's `cache.open_files`
# default (4,096 kept object files; nginx revalidates after 1 s, as linerate's check of a
# kept file runs once a second), as bench.py does in appliance mode. nginx applies
# `open_file_cache` to proxy_cache files too (ngx_http_file_cache_open goes through
# ngx_open_cached_file), so a hit skips open/fstat/close like a static file does.
NGINX_OPEN_FILE_CACHE = 4096
RANGE_START, RANGE_END = 700_000_000, 700_001_023  # inclusive, per the brief
SLICE = "1m"  # nginx slice size (the common nginx video-edge setting)


def log(msg: str) -> None:
    print(f"[proxy] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- origin

ORIGIN_CONF = """\
# Generated by bench/proxy.py: the origin. Serves bench.py's content; the herd objects
# are rate-limited so a 2 MiB object takes ~100 ms, like a remote origin. Every request
# is logged with its start (msec - request_time) and the body bytes it sent.
worker_processes 1;
daemon off;
master_process on;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
worker_rlimit_nofile {nofile};
events {{ worker_connections 4096; multi_accept on; }}
http {{
    log_format origin '$msec $request_time $status $body_bytes_sent $request_method '
                      '$request_uri "$http_range" $connection';
    access_log {work}/access.log origin;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 600s;
    types {{ application/octet-stream bin; }}
    default_type application/octet-stream;
    client_body_temp_path {work}/tmp;
    proxy_temp_path {work}/tmp;
    fastcgi_temp_path {work}/tmp;
    uwsgi_temp_path {work}/tmp;
    scgi_temp_path {work}/tmp;
    server {{
        listen {host}:{port} backlog=4096;
        root {root};
        # /herd/NAME-N.bin: /large/N.bin under a name no cache has seen, slowly.
        # limit_rate alone lets the first second's worth out at once (and a response
        # that fits the socket buffer is never delayed); with at most 64 KiB per write
        # it waits 64 KiB / rate between writes, so 2 MiB at 20m take ~100 ms.
        location /herd/ {{
            limit_rate {herd_rate};
            sendfile_max_chunk 64k;
            rewrite ^/herd/[^/]*-([0-9]+)\\.bin$ /large/$1.bin break;
        }}
        # /range/NAME.bin: the 1 GiB file under a name no cache has seen.
        location /range/ {{
            rewrite ^ /huge.bin break;
        }}
{status}
    }}
}}
"""

STUB_STATUS = """\
        location = /__status {
            stub_status;
            access_log off;
        }"""

# ------------------------------------------------------------------------ nginx proxy

PROXY_CONF = """\
# Generated by bench/proxy.py: nginx as a video edge cache. One worker (pinned by
# taskset; `--nginx-workers` for more on that core), the nginx slice module at 1 MiB
# so large objects and ranges are cached in pieces, proxy_cache_lock so concurrent
# misses on one slice make one origin request, and an open-file cache that also holds
# the cache files' descriptors.
worker_processes {workers};
daemon off;
master_process on;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
worker_rlimit_nofile {nofile};
events {{
    worker_connections {worker_connections};
    multi_accept on;
}}
http {{
    access_log off;
    sendfile on;
    tcp_nopush off;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 600s;
{open_file_cache}
{aio}
    client_body_temp_path {work}/tmp;
    proxy_temp_path {work}/tmp;
    fastcgi_temp_path {work}/tmp;
    uwsgi_temp_path {work}/tmp;
    scgi_temp_path {work}/tmp;
    proxy_cache_path {cache} levels=1:2 keys_zone=edge:64m max_size=16g inactive=1d use_temp_path=off;
    upstream origin {{
        server {host}:{origin_port};
        keepalive 64;
    }}
    server {{
        listen {host}:{port} backlog=4096{reuseport};
        location / {{
            slice {slice};
            proxy_cache edge;
            proxy_cache_key $uri$is_args$args$slice_range;
            proxy_set_header Range $slice_range;
            proxy_cache_valid 200 206 1h;
            proxy_cache_lock on;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://origin;
            add_header X-Cache $upstream_cache_status;
        }}
    }}
}}
"""


@dataclass
class Origin:
    proc: object
    port: int
    work: Path
    has_status: bool

    @property
    def log_path(self) -> Path:
        return self.work / "access.log"


def nginx_has(nginx: str, module: str) -> bool:
    out = subprocess.run([nginx, "-V"], capture_output=True, text=True).stderr
    return module in out


def cache_dir(cfg, name: str) -> Path:
    """Where cache server `name` keeps its cache: in its work directory, or on the
    RAM-backed filesystem of `--cache-fs ram`."""
    return (cfg.cache_root / name) if cfg.cache_root else cfg.pwork / name / "cache"


def mount_ram_fs(cfg) -> Path:
    """`--cache-fs ram`: an ext4 filesystem on a loop device backed by a file in
    /dev/shm, mounted with `discard` (a removed cache gives its memory back). A real
    filesystem with a journal, writeback and flushes, on a device whose speed does not
    drift with a shared host's storage: what a miss costs the server, not what the
    VM's disk was doing that minute. Unmounted at exit."""
    img = Path("/dev/shm/linerate-bench-cachefs.img")
    mnt = cfg.workdir / "cachefs"
    subprocess.run(["umount", str(mnt)], capture_output=True)
    img.unlink(missing_ok=True)
    subprocess.run(["truncate", "-s", cfg.cache_fs_size, str(img)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
    mnt.mkdir(parents=True, exist_ok=True)
    opts = ",".join(["loop", "discard"] + ([cfg.cache_fs_options] if cfg.cache_fs_options else []))
    subprocess.run(["mount", "-o", opts, str(img), str(mnt)], check=True)

    def unmount() -> None:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        img.unlink(missing_ok=True)

    atexit.register(unmount)
    log(f"caches on ext4 over a {cfg.cache_fs_size} file in /dev/shm, mounted at {mnt} ({opts})")
    return mnt


# `--writeback steady`: dirty page cache is written back from this much on (the kernel's
# default, 10 % of available memory, is gigabytes: more than a miss run writes).
STEADY_DIRTY_BACKGROUND_BYTES = 64 << 20


def steady_writeback() -> None:
    """`--writeback steady`: the kernel writes dirty pages back from 64 MiB on
    (`vm.dirty_background_bytes`), restored at exit. A cache filling for longer than it
    takes to dirty a tenth of its memory (seconds at these rates) writes back every byte
    it stores as it goes; by default that work would fall outside a miss run's window
    (and `miss_test`'s `sync` between runs) for a server that never flushes (nginx),
    while linerate's flush (`sync_before_publish`) does it inside. Needs root."""
    sysctl = Path("/proc/sys/vm")
    saved = {k: (sysctl / k).read_text().strip() for k in ("dirty_background_bytes", "dirty_background_ratio")}
    try:
        (sysctl / "dirty_background_bytes").write_text(str(STEADY_DIRTY_BACKGROUND_BYTES))
    except OSError as e:
        raise SystemExit(f"--writeback steady sets vm.dirty_background_bytes and needs root: {e}")

    def restore() -> None:
        # Writing one of the pair zeroes the other: restore the one that was set.
        key = "dirty_background_bytes" if saved["dirty_background_bytes"] != "0" else "dirty_background_ratio"
        (sysctl / key).write_text(saved[key])

    atexit.register(restore)
    log(f"writeback: steady (vm.dirty_background_bytes {STEADY_DIRTY_BACKGROUND_BYTES >> 20} MiB "
        f"during the run; was bytes {saved['dirty_background_bytes']}, ratio {saved['dirty_background_ratio']})")


def start_origin(cfg) -> Origin:
    work = cfg.pwork / "origin"
    shutil.rmtree(work, ignore_errors=True)
    (work / "tmp").mkdir(parents=True)
    port = B.free_port()
    has_status = nginx_has(cfg.nginx, "http_stub_status_module")
    (work / "nginx.conf").write_text(
        ORIGIN_CONF.format(
            work=work, host=HOST, port=port, root=cfg.root, nofile=B.hard_nofile(),
            herd_rate=cfg.herd_rate, status=STUB_STATUS if has_status else "",
        )
    )
    with open(work / "stderr.log", "ab") as f:
        p = B.spawn(
            ["taskset", "-c", str(cfg.origin_cpu), cfg.nginx, "-c", str(work / "nginx.conf"), "-p", str(work)],
            stdout=f, stderr=f,
        )
    B.wait_listening(port, p)
    return Origin(p, port, work, has_status)


def nginx_aio(mode) -> str:
    """The proxy's aio lines for `--nginx-aio` (`True`, from bench/zipf.py: `write`)."""
    if mode is True or mode == "write":
        return "    aio threads;\n    aio_write on;"
    return "    aio threads;" if mode == "threads" else ""


def start_nginx_proxy(cfg, origin: Origin) -> B.Server:
    work = cfg.pwork / "nginx"
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(cache_dir(cfg, "nginx"), ignore_errors=True)
    (work / "tmp").mkdir(parents=True)
    port = B.free_port()
    nofile = B.hard_nofile()
    workers = getattr(cfg, "nginx_workers", 1)  # bench/zipf.py's configuration has none
    (work / "nginx.conf").write_text(
        PROXY_CONF.format(
            work=work, host=HOST, port=port, origin_port=origin.port, cache=cache_dir(cfg, "nginx"),
            nofile=nofile, worker_connections=max(1024, nofile - 100), slice=SLICE,
            open_file_cache=B.nginx_open_file_cache(cfg.nginx_open_file_cache),
            # `--nginx-aio` and bench/zipf.py's cache test: cache files read (and
            # temporary files written) by a thread pool, as an operator of a library
            # larger than memory runs it.
            aio=nginx_aio(getattr(cfg, "nginx_aio", "off")),
            workers=workers,
            # Several workers: a listening socket each, so the kernel spreads the
            # connections over them (as linerate's workers have), not one worker's
            # `multi_accept` taking them all.
            reuseport=" reuseport" if workers > 1 else "",
        )
    )
    with open(work / "stderr.log", "ab") as f:
        p = B.spawn(
            ["taskset", "-c", str(cfg.server_cpu), cfg.nginx, "-c", str(work / "nginx.conf"), "-p", str(work)],
            stdout=f, stderr=f,
        )
    B.wait_listening(port, p)
    return B.Server("nginx", p, port)


def build_kernel_cache(cfg) -> str:
    """bench/kernel-cache.c, compiled into the work directory."""
    src = Path(__file__).resolve().parent / "kernel-cache.c"
    out = cfg.workdir / "kernel-cache"
    subprocess.run(["gcc", "-O2", "-Wall", "-pthread", "-o", str(out), str(src)], check=True)
    return str(out)


def start_kernel_cache(cfg, name: str, origin: Origin) -> B.Server:
    work = cfg.pwork / name
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(cache_dir(cfg, name), ignore_errors=True)
    work.mkdir(parents=True)
    cache_dir(cfg, name).parent.mkdir(parents=True, exist_ok=True)
    port = B.free_port()
    cmd = ["taskset", "-c", str(cfg.server_cpu), cfg.kernel_cache, HOST, str(port), str(origin.port),
           str(cache_dir(cfg, name)), str(1 << 20), KERNEL_SERVERS[name]]
    with open(work / "stderr.log", "ab") as f:
        p = B.spawn(cmd, stdout=f, stderr=f)
    B.wait_listening(port, p)
    return B.Server(name, p, port)


def start_proxy(cfg, name: str, origin: Origin) -> B.Server:
    if name == "nginx":
        return start_nginx_proxy(cfg, origin)
    if name == "linerate":
        return start_linerate_proxy(cfg, origin)
    return start_kernel_cache(cfg, name, origin)


def linerate_cache_flags_missing(linerate: str) -> str | None:
    """Why linerate cannot run in cache mode from the command line, or None."""
    if not os.access(linerate, os.X_OK):
        return f"{linerate} is not built"
    out = subprocess.run([linerate, "serve", "--help"], capture_output=True, text=True)
    missing = [f for f in ("--origin", "--cache-dir") if f not in out.stdout]
    if missing:
        return f"`linerate serve` has no {' / '.join(missing)} (cache mode not built yet)"
    return None


def start_linerate_proxy(cfg, origin: Origin) -> B.Server:
    work = cfg.pwork / "linerate"
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(cache_dir(cfg, "linerate"), ignore_errors=True)
    work.mkdir(parents=True)
    cache_dir(cfg, "linerate").mkdir(parents=True)
    port = B.free_port()
    admin_port = B.free_port()
    # A file rather than the quick-start flags: the same 1 MiB slices as nginx's
    # `slice 1m`, the same hour of freshness as its `proxy_cache_valid 200 206 1h` for
    # the origin's responses (which carry none: `default_ttl_s`), and an admin port of
    # its own (the default 9090 may be taken), for the miss tests' fill-write counts.
    # Its workers are its default for the one CPU it may use (two event loops there:
    # cache mode's default), as nginx's are its operators' (`worker_processes` one per
    # core); `--linerate-args '--workers 1'` for one.
    config = work / "linerate.toml"
    config.write_text(
        f'[server]\nlisten = ["{HOST}:{port}"]\n\n'
        f'[admin]\nlisten = "{HOST}:{admin_port}"\n\n'
        f'[cache]\ndurability = "{getattr(cfg, "durability", "sync_before_publish")}"\n\n'
        f'[[cache.disk]]\nname = "d0"\npath = "{cache_dir(cfg, "linerate")}"\nmax_bytes = {8 << 30}\n\n'
        f'[[origin]]\nname = "origin"\nservers = ["http://{HOST}:{origin.port}"]\n\n'
        f'[[route]]\npath_prefix = "/"\norigin = "origin"\nslice_bytes = {1 << 20}\n'
        f'default_ttl_s = 3600\n'
    )
    cmd = [
        "taskset", "-c", str(cfg.server_cpu), cfg.linerate, "serve", "--config", str(config),
    ] + cfg.linerate_args
    (work / "command").write_text(" ".join(cmd) + "\n")
    with open(work / "stderr.log", "ab") as f:
        p = B.spawn(cmd, stdout=f, stderr=f)
    try:
        B.wait_listening(port, p)
    except RuntimeError as e:
        tail = (work / "stderr.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"linerate cache mode did not start: {e}\n{tail}") from None
    server = B.Server("linerate", p, port)
    server.admin_port = admin_port  # type: ignore[attr-defined]
    return server


def fill_writes(server: B.Server) -> dict[str, float] | None:
    """linerate's fill writes so far, by where they ran (`on`: the worker, or the fill
    threads after slow writes), from its metrics; None for other servers."""
    port = getattr(server, "admin_port", None)
    if port is None:
        return None
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if line.startswith("linerate_cache_fill_writes_total{"):
            label = line.split('on="', 1)[1].split('"', 1)[0]
            out[label] = float(line.rsplit(" ", 1)[1])
    return out


# ------------------------------------------------------------------------ origin log


@dataclass
class LogLine:
    start: float  # wall clock (msec - request_time): when the origin read the request
    end: float  # wall clock when it finished sending
    status: int
    bytes: int
    method: str
    uri: str
    range: str


def read_origin_log(origin: Origin) -> list[LogLine]:
    out = []
    try:
        text = origin.log_path.read_text(errors="replace")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        parts = line.split(" ", 6)
        if len(parts) < 7:
            continue
        msec, rt, status, nbytes, method, uri, rest = parts
        rng = rest.split('"')[1] if rest.count('"') >= 2 else "-"
        out.append(LogLine(float(msec) - float(rt), float(msec), int(status), int(nbytes), method, uri, rng))
    return out


def origin_status(origin: Origin) -> dict | None:
    """nginx stub_status: {'active', 'reading', 'writing', 'waiting'} or None."""
    if not origin.has_status:
        return None
    try:
        with socket.create_connection((HOST, origin.port), timeout=2) as s:
            s.sendall(f"GET /__status HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError:
        return None
    text = data.decode(errors="replace")
    try:
        words = text.split("Reading:")[1].split()
        return {
            "active": int(text.split("Active connections:")[1].split()[0]),
            "reading": int(words[0]),
            "writing": int(words[2]),
            "waiting": int(words[4]),
        }
    except (IndexError, ValueError):
        return None


def wait_origin_idle(origin: Origin, limit: float) -> bool:
    """Wait until the origin is sending nothing (stub_status: the status request is the
    only one being written), at most `limit` s; a proxy may keep fetching after its
    client got the answer (read-ahead, whole-object fill). Without stub_status: sleep."""
    deadline = time.monotonic() + limit
    time.sleep(0.2)
    if not origin.has_status:
        time.sleep(max(0.0, min(limit, 3.0) - 0.2))
        return True
    while time.monotonic() < deadline:
        st = origin_status(origin)
        if st is not None and st["writing"] <= 1 and st["reading"] == 0:
            return True
        time.sleep(0.1)
    return False


# ---------------------------------------------------------------------------- clients


@dataclass
class Fetch:
    sent: float = 0.0  # wall clock (time.time(), the clock nginx's $msec uses)
    first: float | None = None
    done: float | None = None
    status: int | None = None
    length: int | None = None
    body_bytes: int = 0
    body: bytes = b""
    error: str | None = None


def fetch_many(port: int, path: str, n: int, headers: dict[str, str] | None = None,
               keep_body: bool = False, timeout: float = 60.0) -> list[Fetch]:
    """Open `n` connections, then send one GET on each as close together as possible,
    and read all responses with one selector: per client, time sent, time of the first
    response byte and of the last. Bodies are discarded in the kernel (MSG_TRUNC)
    unless `keep_body`."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    req = f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n{extra}Connection: close\r\n\r\n".encode()
    socks = []
    for _ in range(n):
        s = socket.create_connection((HOST, port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    sel = selectors.DefaultSelector()
    fetches = [Fetch() for _ in range(n)]
    heads = [b""] * n
    for i, s in enumerate(socks):
        s.setblocking(False)
    for i, s in enumerate(socks):
        fetches[i].sent = time.time()
        s.sendall(req)  # a few hundred bytes: fits in an empty socket buffer
        sel.register(s, selectors.EVENT_READ, i)
    buf = bytearray(1 << 20)
    left = n
    deadline = time.monotonic() + timeout

    def finish(i: int, s: socket.socket, now: float, error: str | None = None) -> None:
        nonlocal left
        f = fetches[i]
        f.done = now
        f.error = error
        sel.unregister(s)
        s.close()
        left -= 1

    while left and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.2):
            i, s = key.data, key.fileobj
            f = fetches[i]
            try:
                if f.status is None or keep_body:
                    got = s.recv_into(buf)
                    data = bytes(buf[:got])
                else:
                    got = s.recv_into(buf, len(buf), socket.MSG_TRUNC)
                    data = b""
            except BlockingIOError:
                continue
            except OSError as e:
                finish(i, s, time.time(), f"{type(e).__name__}: {e}")
                continue
            now = time.time()
            if got and f.first is None:
                f.first = now
            if got == 0:
                complete = f.length is not None and f.body_bytes >= f.length
                finish(i, s, now, None if complete or (f.status is not None and f.length is None)
                       else "closed before the end")
                continue
            if f.status is None:
                heads[i] += data
                end = heads[i].find(b"\r\n\r\n")
                if end < 0:
                    continue
                head, rest = heads[i][:end].decode(errors="replace"), heads[i][end + 4:]
                lines = head.split("\r\n")
                f.status = int(lines[0].split()[1])
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        f.length = int(value.strip())
                f.body_bytes = len(rest)
                if keep_body:
                    f.body = rest
            else:
                f.body_bytes += got
                if keep_body:
                    f.body += data
            if f.length is not None and f.body_bytes >= f.length:
                finish(i, s, now)
    for key in list(sel.get_map().values()):
        fetches[key.data].error = "timed out"
        key.fileobj.close()
    return fetches


def fetch_all_once(port: int, paths: list[str]) -> int:
    """GET each path once (keep-alive, sequential); returns the number not 200."""
    bad = 0
    with socket.create_connection((HOST, port), timeout=30) as s:
        for p in paths:
            s.sendall(f"GET {p} HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(65536)
                if not chunk:
                    raise RuntimeError(f"warm-up: connection closed on {p}")
                head += chunk
            h, rest = head.split(b"\r\n\r\n", 1)
            lines = h.decode(errors="replace").split("\r\n")
            status = int(lines[0].split()[1])
            length = next(int(l.split(":", 1)[1]) for l in lines[1:] if l.lower().startswith("content-length:"))
            left = length - len(rest)
            while left > 0:
                chunk = s.recv(min(left, 1 << 20))
                if not chunk:
                    raise RuntimeError(f"warm-up: short body on {p}")
                left -= len(chunk)
            bad += status != 200
    return bad


# ------------------------------------------------------------------------------ tests


def warm_fill(server: B.Server, origin: Origin, test: str) -> dict:
    """Fill one cache with every object of a warm-hit test: two sequential passes; the
    second must be all hits (no origin request). Returns what the fill saw."""
    prefix, count, _, _ = WARM_TESTS[test]
    paths = [f"{prefix}{i}.bin" for i in range(count)]
    t = time.monotonic()
    n0 = len(read_origin_log(origin))
    bad = fetch_all_once(server.port, paths)
    wait_origin_idle(origin, 10)
    n1 = len(read_origin_log(origin))
    bad += fetch_all_once(server.port, paths)  # second pass: all hits?
    wait_origin_idle(origin, 10)
    n2 = len(read_origin_log(origin))
    return {
        "fill_s": time.monotonic() - t, "fill_not_200": bad,
        # one per 1 MiB slice in both caches: 2 per 2 MiB object, 1 per 64 KiB object
        "fill_first_pass_origin_requests": n1 - n0,
        "fill_second_pass_origin_requests": n2 - n1,
    }


def warm_test(cfg, server: B.Server, origin: Origin, rnd: int, test: str) -> dict:
    """Warm-hit throughput on one test's objects (the cache was filled before); counts
    the origin requests for those objects during the run (want 0)."""
    prefix, count, conns, _ = WARM_TESTS[test]
    before = sum(1 for l in read_origin_log(origin) if l.uri.startswith(prefix))
    args = B.files_args(cfg, prefix, count, conns)
    run = B.run_generator(cfg, server, args)
    wait_origin_idle(origin, 5)
    after = sum(1 for l in read_origin_log(origin) if l.uri.startswith(prefix))
    row = B.summarize(server, test, rnd, run)
    row["origin_requests"] = after - before
    return row


def miss_test(cfg, server: B.Server, origin: Origin, rnd: int, test: str) -> dict:
    """Miss throughput: every request a new URL, so every one is an origin fetch, a
    store and a send. Counts the origin requests of this run's URLs (its own seed):
    one per 1 MiB slice of each miss, or the cache was not missing."""
    prefix, count, conns, _, _ = MISS_TESTS[test]
    # A seed of its own per test, round and server, so the count is this run's alone.
    seed = 1000 * (1 + list(MISS_TESTS).index(test)) + 10 * rnd + SEED_OF_SERVER[server.name]
    mark = f"?u={seed}."
    # No warm-up: a miss has nothing to warm, and the origin count then covers exactly
    # the measured requests (plus those in flight at the end, one per connection).
    args = B.files_args(cfg, prefix, count, conns) + ["--unique", "--seed", str(seed)]
    args[args.index("--warmup") + 1] = "0s"
    # Both caches share one filesystem: write back what the runs before left dirty, or
    # linerate's flushes (`syncfs`) would pay for it.
    os.sync()
    since = time.time() - 1.0  # mtime granularity and clock reads: a second's margin
    writes_before = fill_writes(server)
    run = B.run_generator(cfg, server, args)
    wait_origin_idle(origin, 10)
    row = B.summarize(server, test, rnd, run)
    # linerate: the share of its fill writes sent to the fill threads (after slow writes
    # on the worker), which costs a hand-off per write: two regimes of one build.
    writes_after = fill_writes(server)
    if writes_before is not None and writes_after is not None:
        d = {k: writes_after.get(k, 0) - writes_before.get(k, 0) for k in writes_after}
        total = sum(d.values())
        row["fill_writes_pooled_share"] = d.get("fill_threads", 0) / total if total else None
    # What the run stored: a cache that fell behind and relayed misses without storing
    # them (linerate past `max_publish_backlog`) would show fast "misses" that are not.
    # linerate publishes in the background: count once the number settles.
    row["stored_files_per_request"] = (
        settled_count(lambda: stored_files(cfg, server.name, since)) / run.result["requests"]
        if run.result.get("requests") else None
    )
    per_url: dict[str, int] = {}
    for l in read_origin_log(origin):
        if l.uri.startswith(prefix) and mark in l.uri:
            per_url[l.uri] = per_url.get(l.uri, 0) + 1
    row["origin_requests"] = sum(per_url.values())
    row["origin_requests_per_request"] = (
        row["origin_requests"] / run.result["requests"] if run.result.get("requests") else None
    )
    # Per request above includes the slices fetched for the requests still in flight when
    # the window closed (up to one per connection), which weighs with few long requests;
    # the most for one URL does not: above the slice count, a slice was fetched twice.
    row["origin_requests_max_per_url"] = max(per_url.values(), default=None)
    # What went wrong, when something did (JSON and the log line only).
    row["error_kinds"] = {k: v for k, v in run.result.get("errors", {}).items() if v}
    row["statuses"] = run.result.get("status", {})
    for c, u in sorted(run.cpu_util.items()):
        row[f"cpu{c}_util"] = u
    return row


def stored_files(cfg, name: str, since: float) -> int:
    """Object files in a cache server's cache written since `since` (a round's own:
    eviction of older ones does not count): linerate's `objects/` (not its temporary
    files), bench/kernel-cache.c's `objects/` likewise, nginx's cache directory (its
    temporary files end in a dot and ten digits)."""
    cache = cache_dir(cfg, name)
    if name == "linerate" or name in KERNEL_SERVERS:
        cache = cache / "objects"
    if not cache.is_dir():
        return 0
    n = 0
    for f in cache.rglob("*"):
        try:
            st = f.stat()
        except OSError:
            continue
        if st.st_mtime >= since and not re.search(r"\.\d{10}$", f.name) and f.is_file():
            n += 1
    return n


def settled_count(count, limit: float = 30.0) -> int:
    """`count()` once it has not changed for 2 s (a flush of a large batch can take over
    a second), or after `limit` seconds."""
    last, since = count(), time.monotonic()
    deadline = since + limit
    while time.monotonic() < deadline and time.monotonic() - since < 2.0:
        time.sleep(0.25)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
    return last


def drop_cache(cfg, proxies: dict[str, B.Server], name: str, origin: Origin) -> int:
    """Stop one cache server, remove its work directory (its cache with it) and start it
    again empty (its start removes the directory too; removing it here as well frees
    the disk even when the start fails). Returns the bytes its cache held."""
    B.stop(proxies.pop(name).proc)
    cache = cache_dir(cfg, name)
    held = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) if cache.is_dir() else 0
    shutil.rmtree(cfg.pwork / name, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    proxies[name] = start_proxy(cfg, name, origin)
    log(f"{name}: removed its cache ({held / 1e9:.1f} GB) and started it again, empty")
    return held


def herd_test(cfg, server: B.Server, origin: Origin, rnd: int) -> dict:
    path = f"/herd/{server.name}{rnd}-{rnd % B.LARGE_COUNT}.bin"
    fetches = fetch_many(server.port, path, cfg.herd_clients, timeout=cfg.herd_timeout)
    wait_origin_idle(origin, 30)
    lines = [l for l in read_origin_log(origin) if l.uri == path]
    ok = [f for f in fetches if f.error is None and f.status == 200 and f.body_bytes == B.LARGE_SIZE]
    t0 = min(f.sent for f in fetches)
    t_end = max((f.done or f.sent) for f in fetches)
    origin_start = min((l.start for l in lines), default=None)
    firsts = [f.first for f in fetches if f.first is not None]
    # The origin's first byte: the earliest origin request's start from its log
    # (nginx writes the head as soon as it has opened the file, well under 1 ms later).
    rel = sorted((t - origin_start) * 1e3 for t in firsts) if origin_start else []
    ttfb = sorted((f.first - f.sent) * 1e3 for f in fetches if f.first is not None)
    return {
        "server": server.name, "test": "herd", "round": rnd, "path": path,
        "clients": len(fetches), "ok": len(ok),
        "errors": [f.error or f"status {f.status}, {f.body_bytes} bytes" for f in fetches if f not in ok][:5],
        "origin_requests": len(lines),
        "origin_bytes": sum(l.bytes for l in lines),
        "origin_ranges": [l.range for l in lines],
        "origin_time_ms": sum(l.end - l.start for l in lines) * 1e3,
        "herd_ms": (t_end - t0) * 1e3,
        "origin_start_after_send_ms": (origin_start - t0) * 1e3 if origin_start else None,
        "ttfb_ms_p50": pct(ttfb, 50), "ttfb_ms_p99": pct(ttfb, 99), "ttfb_ms_max": ttfb[-1] if ttfb else None,
        "rel_first_byte_ms_p50": pct(rel, 50), "rel_first_byte_ms_p99": pct(rel, 99),
        "rel_first_byte_ms_max": rel[-1] if rel else None,
        "rel_first_byte_ms_min": rel[0] if rel else None,
    }


def range_test(cfg, server: B.Server, origin: Origin, rnd: int) -> dict:
    path = f"/range/{server.name}{rnd}.bin"
    want = read_huge(cfg, RANGE_START, RANGE_END + 1 - RANGE_START)
    [f] = fetch_many(server.port, path, 1, {"Range": f"bytes={RANGE_START}-{RANGE_END}"},
                     keep_body=True, timeout=cfg.range_timeout)
    at_answer = [l for l in read_origin_log(origin) if l.uri == path]
    settled = wait_origin_idle(origin, cfg.settle)
    lines = [l for l in read_origin_log(origin) if l.uri == path]
    return {
        "server": server.name, "test": "range", "round": rnd, "path": path,
        "status": f.status, "error": f.error, "correct": f.status == 206 and f.body == want,
        "ttfb_ms": (f.first - f.sent) * 1e3 if f.first else None,
        "total_ms": (f.done - f.sent) * 1e3 if f.done and f.first else None,
        "origin_requests": len(lines),
        "origin_bytes": sum(l.bytes for l in lines),
        "origin_bytes_at_answer": sum(l.bytes for l in at_answer),
        "origin_ranges": [l.range for l in lines][:10],
        "origin_settled": settled,
    }


def make_huge_miss_content(root: Path) -> list[Path]:
    """miss-huge's objects under ROOT/miss64m/: real data, each 2 MiB block stamped with
    its own number (no two slices alike). A file already there at the right size is
    kept; a missing one is written under a temporary name and renamed once on disk, so
    a run stopped halfway leaves no short file to be taken for a whole one."""
    count = MISS_TESTS["miss-huge"][1]
    d = root / HUGE_MISS_DIR
    d.mkdir(parents=True, exist_ok=True)
    paths = [d / f"{i}.bin" for i in range(count)]
    todo = [p for p in paths if not (p.is_file() and p.stat().st_size == HUGE_MISS_SIZE)]
    if todo:
        log(f"content: writing {len(todo)} x {HUGE_MISS_SIZE >> 20} MiB under {d}")
        block = bytearray(os.urandom(B.LARGE_SIZE))
        for p in todo:
            tmp = p.with_name(p.name + ".part")
            with open(tmp, "wb") as f:
                for j in range(HUGE_MISS_SIZE // len(block)):
                    block[:8] = (1_000_000 + int(p.stem) * 1_000 + j).to_bytes(8, "little")
                    f.write(block)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, p)
    return paths


def read_huge(cfg, offset: int, n: int) -> bytes:
    with open(cfg.root / "huge.bin", "rb") as f:
        f.seek(offset)
        return f.read(n)


def pct(sorted_vals: list[float], p: float):
    if not sorted_vals:
        return None
    k = min(len(sorted_vals) - 1, max(0, math.ceil(p / 100 * len(sorted_vals)) - 1))
    return sorted_vals[k]


# ----------------------------------------------------------------------------- report


def med(rows: list[dict], key: str):
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    return statistics.median(vals) if vals else None


def report(rows: list[dict], servers: list[str], failed: dict[str, str]) -> str:
    spec = []
    for test, (_, _, _, size) in WARM_TESTS.items():
        w = f"warm hit {size}"
        spec += [
            # (test, key, label, format, ratio?)
            (test, "requests_per_s", f"{w}: req/s", ".0f", True),
            (test, "gb_per_s", f"{w}: GB/s", ".2f", True),
            (test, "cpu_s_per_gb", f"{w}: server CPU-s/GB (lower is better)", ".3f", True),
            (test, "server_cpu_util", f"{w}: server CPU (1.00 = saturated)", ".2f", False),
            (test, "client_cpu_util", f"{w}: generator CPU", ".2f", False),
            (test, "p50_us", f"{w}: p50 µs", ".0f", True),
            (test, "p99_us", f"{w}: p99 µs", ".0f", True),
            (test, "errors", f"{w}: errors", ".0f", False),
            (test, "origin_requests", f"{w}: origin requests in the window (want 0)", ".0f", False),
            (test, "fill_first_pass_origin_requests",
             f"{w}: origin requests on the first fill pass (one per 1 MiB slice)", ".0f", False),
            (test, "fill_second_pass_origin_requests",
             f"{w}: origin requests on the second fill pass (want 0)", ".0f", False),
            (test, "other_load", f"{w}: other load (cores)", ".2f", False),
        ]
    for test, (_, _, conns, size, per) in MISS_TESTS.items():
        m = f"miss {size} ({conns} conns)"
        spec += [
            (test, "requests_per_s", f"{m}: req/s", ".0f", True),
            (test, "gb_per_s", f"{m}: GB/s", ".3f", True),
            (test, "cpu_s_per_gb", f"{m}: server CPU-s/GB (lower is better)", ".3f", True),
            (test, "server_cpu_util", f"{m}: server CPU (1.00 = saturated)", ".2f", False),
            (test, "client_cpu_util", f"{m}: generator CPU", ".2f", False),
        ] + [
            (test, f"cpu{c}_util", f"{m}: CPU {c} busy (all processes)", ".2f", False)
            for c in range(os.cpu_count() or 1)
        ] + [
            (test, "p50_us", f"{m}: p50 µs", ".0f", True),
            (test, "p99_us", f"{m}: p99 µs", ".0f", True),
            (test, "errors", f"{m}: errors", ".0f", False),
            (test, "origin_requests_per_request",
             f"{m}: origin requests per request (want {per}: one per 1 MiB slice)", ".2f", False),
            (test, "origin_requests_max_per_url", f"{m}: most origin requests for one URL (want {per})",
             ".0f", False),
            (test, "stored_files_per_request",
             f"{m}: object files stored per request (want ~{per}: one per slice; fewer: relayed, not stored)",
             ".2f", False),
            # (each miss round's cache is measured, then removed)
            (test, "stored_mib_per_request", f"{m}: MiB in the cache per request (want ~{size})", ".1f", False),
        ]
    spec += [
        ("herd", "origin_requests", "herd: origin requests", ".0f", True),
        ("herd", "origin_bytes", "herd: origin body bytes", ",.0f", True),
        ("herd", "ok", "herd: clients served completely (of 200)", ".0f", False),
        ("herd", "herd_ms", "herd: whole herd, first request sent → last byte, ms", ".0f", True),
        ("herd", "origin_time_ms", "herd: origin send time (sum over its requests), ms", ".0f", False),
        ("herd", "rel_first_byte_ms_min", "herd: client first byte − origin start, min ms", ".0f", False),
        ("herd", "rel_first_byte_ms_p50", "herd: client first byte − origin start, p50 ms", ".0f", True),
        ("herd", "rel_first_byte_ms_p99", "herd: client first byte − origin start, p99 ms", ".0f", True),
        ("herd", "rel_first_byte_ms_max", "herd: client first byte − origin start, max ms", ".0f", True),
        ("herd", "ttfb_ms_p50", "herd: client TTFB (own send → first byte), p50 ms", ".0f", True),
        ("range", "ttfb_ms", "range 1 KiB at 700 MB of 1 GiB: TTFB ms", ".1f", True),
        ("range", "total_ms", "range: complete response ms", ".1f", True),
        ("range", "origin_requests", "range: origin requests", ".0f", True),
        ("range", "origin_bytes_at_answer", "range: origin bytes by the answer", ",.0f", True),
        ("range", "origin_bytes", "range: origin bytes after the origin went idle", ",.0f", True),
    ]
    # nginx and linerate always (a server not run says so); the kernel's work alone when
    # run, with how it compares to nginx and how much of it linerate reaches.
    kernels = [k for k in KERNEL_SERVERS if k in servers]
    cols = ["nginx", "linerate", *kernels]
    ratios = [("linerate", "nginx")] + [(k, "nginx") for k in kernels] + [("linerate", k) for k in kernels]
    lines = ["| test | " + " | ".join(cols) + " | " + " | ".join(f"{a}/{b}" for a, b in ratios) + " |",
             "|---|" + "---:|" * (len(cols) + len(ratios))]
    for test, key, label, f, ratio in spec:
        vals = {}
        for s in cols:
            rs = [r for r in rows if r.get("test") == test and r["server"] == s]
            vals[s] = med(rs, key) if rs else None
        if all(v is None for v in vals.values()):
            continue
        cells = []
        for s in cols:
            if s not in servers:
                cells.append("not run")
            elif vals[s] is None:
                cells.append("FAILED" if s in failed else "—")
            else:
                cells.append(format(vals[s], f))
        for a, b in ratios:
            cells.append(f"{vals[a] / vals[b]:.2f}×" if ratio and vals[b] and vals[a] is not None else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for s in ("nginx", "linerate"):
        rs = [r for r in rows if r.get("test") == "range" and r["server"] == s]
        if rs and not all(r.get("correct") for r in rs):
            lines.append(f"| range: **{s} answered wrong bytes or status** ({[r.get('status') for r in rs]}) | | | |")
        hs = [r for r in rows if r.get("test") == "herd" and r["server"] == s]
        if hs and any(r["ok"] != r["clients"] for r in hs):
            lines.append(f"| herd: **{s}: some clients failed** ({hs[0]['errors']}) | | | |")
        for test, (_, _, _, size) in WARM_TESTS.items():
            ws = [r for r in rows if r.get("test") == test and r["server"] == s]
            if any(r.get("fill_not_200") or r.get("fill_second_pass_origin_requests") for r in ws):
                lines.append(f"| warm hit {size}: **{s}: the fill was not all 200s, or its second pass "
                             f"went to the origin: not all hits** | | | |")
            if any(r.get("origin_requests") or r.get("errors") for r in ws):
                lines.append(f"| warm hit {size}: **{s}: errors or origin requests in the window** | | | |")
    return "\n".join(lines)


# -------------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round, 2 s warm-hit runs")
    ap.add_argument("--rounds", type=int, help="rounds per test and server, median reported (3; quick 1)")
    ap.add_argument("--duration", type=float, help="measured seconds per warm-hit run (10; quick 2)")
    ap.add_argument("--warmup", type=float, help="generator warm-up seconds per warm-hit run (2; quick 0.5)")
    ap.add_argument("--tests", default=",".join(ALL_TESTS), help="comma list of " + ", ".join(ALL_TESTS))
    ap.add_argument("--servers", default="nginx,linerate", help="comma list of " + ", ".join(ALL_SERVERS))
    ap.add_argument("--herd-clients", type=int, default=HERD_CLIENTS)
    ap.add_argument("--herd-rate", default="20m",
                    help="origin send rate for the herd object (nginx limit_rate; 20m ≈ 100 ms per 2 MiB)")
    ap.add_argument("--herd-timeout", type=float, default=60.0)
    ap.add_argument("--range-timeout", type=float, default=60.0)
    ap.add_argument("--settle", type=float, default=30.0,
                    help="longest wait for the origin to go idle after the range answer")
    ap.add_argument("--max-other-load", type=float, default=0.10)
    ap.add_argument("--wait-quiet", type=float, default=0.0,
                    help="before each warm-hit run, wait up to this many seconds for a quiet machine")
    ap.add_argument("--retries", type=int, default=0, help="times a disturbed warm-hit run is run again")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--origin-cpu", type=int, default=None, help="default: the client CPU")
    ap.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/var/tmp")) / "linerate-bench")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--linerate", default="target/release/linerate")
    ap.add_argument("--nginx-open-file-cache", type=int, default=NGINX_OPEN_FILE_CACHE,
                    help="nginx proxy's open_file_cache max (4096, linerate's cache.open_files; 0 = off, "
                         "as proxy.py had it before the warm-small test)")
    ap.add_argument("--nginx-aio", choices=["off", "threads", "write"], default="off",
                    help="nginx proxy with `aio threads;` (cache files read by its thread pool, as "
                         "operators of large libraries run it), or with `aio_write on;` too (temporary "
                         "files written there as well); default off")
    ap.add_argument("--durability", default="sync_before_publish", choices=["sync_before_publish", "no_sync"],
                    help="linerate's [cache] durability (default: its default; nginx never flushes)")
    ap.add_argument("--cache-fs", default="disk", choices=["disk", "ram"],
                    help="where the caches live: WORKDIR's filesystem (disk), or ext4 on a loop device "
                         "over /dev/shm (ram: the same filesystem work at a steady device speed; needs root)")
    ap.add_argument("--cache-fs-size", default="8G", help="size of the --cache-fs ram filesystem")
    ap.add_argument("--cache-fs-options", default="",
                    help="more mount options for the --cache-fs ram filesystem (e.g. lazytime)")
    ap.add_argument("--writeback", default="deferred", choices=["deferred", "steady"],
                    help="deferred: the kernel's dirty-page thresholds as they are (gigabytes: a server "
                         "that never flushes writes nothing back within a miss run); steady: written back "
                         "from 64 MiB on, as a cache filling for longer than that does (needs root)")
    ap.add_argument("--linerate-args", default="", help="extra arguments for linerate serve (one string)")
    ap.add_argument("--nginx-workers", type=int, default=1,
                    help="nginx worker processes, all on the server CPU (compare with "
                         "--linerate-args '--workers N')")
    ap.add_argument("--generator", default=None)
    ap.add_argument("--out", type=Path, default=None, help="results JSON (default WORKDIR/proxy-results.json)")
    cfg = ap.parse_args()
    for name, full, quick in [("rounds", 3, 1), ("duration", 10.0, 2.0), ("warmup", 2.0, 0.5)]:
        if getattr(cfg, name) is None:
            setattr(cfg, name, quick if cfg.quick else full)
    tests = [t for t in cfg.tests.split(",") if t]
    servers = [s for s in cfg.servers.split(",") if s]
    for t in tests:
        if t not in ALL_TESTS:
            ap.error(f"unknown test {t}")
    for s in servers:
        if s not in ALL_SERVERS:
            ap.error(f"unknown server {s}")
    if any(s in KERNEL_SERVERS for s in servers) and set(tests) - set(MISS_TESTS):
        ap.error("the kernel servers run the miss tests only (--tests miss-small,miss-large,miss-huge)")
    if cfg.origin_cpu is None:
        cfg.origin_cpu = cfg.client_cpu
    cfg.linerate_args = cfg.linerate_args.split()
    cfg.generator = cfg.generator.split() if cfg.generator else B.default_generator(cfg.linerate)
    cfg.workdir = cfg.workdir.resolve()
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    cfg.root = cfg.workdir / "root"
    cfg.pwork = cfg.workdir / "proxy"
    cfg.pwork.mkdir(exist_ok=True)
    cfg.cache_root = mount_ram_fs(cfg) if cfg.cache_fs == "ram" else None
    if cfg.writeback == "steady":
        steady_writeback()
    cfg.kernel_cache = build_kernel_cache(cfg) if any(s in KERNEL_SERVERS for s in servers) else None
    # bench.py's cold workload uses these names; run_generator reads them from cfg.
    cfg.idle_settle = 0.0
    out_path = cfg.out or cfg.workdir / "proxy-results.json"

    signal.signal(signal.SIGTERM, B.on_signal)
    signal.signal(signal.SIGHUP, B.on_signal)
    atexit.register(B.stop_all)
    os.sched_setaffinity(0, {cfg.client_cpu})

    failed: dict[str, str] = {}
    if "linerate" in servers:
        why = linerate_cache_flags_missing(cfg.linerate)
        if why:
            log(f"LINERATE PART FAILED: {why}; measuring nginx only")
            failed["linerate"] = why

    B.make_content(cfg.root)
    B.warm(B.large_paths(cfg.root) + [cfg.root / "huge.bin"]
           + (B.small_paths(cfg.root) if {"warm-small", "miss-small"} & set(tests) else [])
           + (make_huge_miss_content(cfg.root) if "miss-huge" in tests else []))
    origin = start_origin(cfg)
    log(f"origin: nginx on {HOST}:{origin.port} (CPU {cfg.origin_cpu}), log {origin.log_path}"
        + ("" if origin.has_status else "; no stub_status: fixed 3 s settle"))

    proxies: dict[str, B.Server] = {}
    rows: list[dict] = []
    started = time.time()
    try:
        for s in servers:
            if s in failed:
                continue
            try:
                proxies[s] = start_proxy(cfg, s, origin)
                log(f"{s}: cache proxy on {HOST}:{proxies[s].port} (CPU {cfg.server_cpu})")
            except RuntimeError as e:
                log(f"{s.upper()} PART FAILED: {e}")
                failed[s] = str(e)
        live = [s for s in servers if s in proxies]

        if "range" in tests:
            for rnd in range(cfg.rounds):
                for s in live if rnd % 2 == 0 else list(reversed(live)):
                    row = range_test(cfg, proxies[s], origin, rnd)
                    rows.append(row)
                    log(f"range r{rnd} {s:>8}: status {row['status']} correct={row['correct']}, TTFB "
                        f"{B.fmt(row['ttfb_ms'], '.1f')} ms, origin {row['origin_requests']} req / "
                        f"{row['origin_bytes']:,} B {row['origin_ranges'][:3]}")
        if "herd" in tests:
            for rnd in range(cfg.rounds):
                for s in live if rnd % 2 == 0 else list(reversed(live)):
                    row = herd_test(cfg, proxies[s], origin, rnd)
                    rows.append(row)
                    log(f"herd r{rnd} {s:>8}: {row['ok']}/{row['clients']} ok, origin {row['origin_requests']} req "
                        f"{row['origin_ranges'][:4]}, herd {row['herd_ms']:.0f} ms, first byte − origin start "
                        f"p50 {B.fmt(row['rel_first_byte_ms_p50'], '.0f')} / max "
                        f"{B.fmt(row['rel_first_byte_ms_max'], '.0f')} ms")
        for test in [t for t in WARM_TESTS if t in tests]:
            prefix, count, _, size = WARM_TESTS[test]
            fills = {}
            for s in live:
                fills[s] = warm_fill(proxies[s], origin, test)
                log(f"{s}: warmed {count} x {size} in {fills[s]['fill_s']:.1f} s; "
                    f"{fills[s]['fill_not_200']} not 200; origin requests on the first pass: "
                    f"{fills[s]['fill_first_pass_origin_requests']}, on the second: "
                    f"{fills[s]['fill_second_pass_origin_requests']}")
            for rnd in range(cfg.rounds):
                for s in live if rnd % 2 == 0 else list(reversed(live)):
                    for attempt in range(1 + cfg.retries):
                        if cfg.wait_quiet > 0:
                            B.wait_quiet(cfg.max_other_load, cfg.wait_quiet)
                        row = warm_test(cfg, proxies[s], origin, rnd, test)
                        row.update(test=test, attempt=attempt, **fills[s])
                        if row["other_load"] <= cfg.max_other_load or attempt == cfg.retries:
                            break
                        log(f"{test} r{rnd} {s}: other load {row['other_load']:.2f} > {cfg.max_other_load}; again")
                    rows.append(row)
                    log(f"{test} r{rnd} {s:>8}: {row['requests_per_s']:.0f} req/s, {row['gb_per_s']:.2f} GB/s, "
                        f"{B.fmt(row['cpu_s_per_gb'], '.3f')} CPU-s/GB, server CPU "
                        f"{B.fmt(row['server_cpu_util'], '.2f')}, errors {row['errors']}, origin requests "
                        f"{row['origin_requests']}, other load {B.fmt(row['other_load'], '.2f')}")
        for test in [t for t in MISS_TESTS if t in tests]:
            for rnd in range(cfg.rounds):
                for s in live if rnd % 2 == 0 else list(reversed(live)):
                    if cfg.wait_quiet > 0:
                        B.wait_quiet(cfg.max_other_load, cfg.wait_quiet)
                    row = miss_test(cfg, proxies[s], origin, rnd, test)
                    row.update(test=test)
                    if origin.proc.poll() is not None:
                        # Every later request would be a fast 502: say why, not a figure.
                        raise RuntimeError(f"the origin exited (status {origin.proc.returncode}) "
                                           f"during {test} r{rnd} {s}; see {origin.work}/error.log")
                    rows.append(row)
                    if test in DROP_CACHE_AFTER_ROUND:
                        row["cache_bytes"] = drop_cache(cfg, proxies, s, origin)
                        if row.get("requests"):
                            row["stored_mib_per_request"] = row["cache_bytes"] / (1 << 20) / row["requests"]
                    cpus = ", ".join(f"{k} {row[k]:.2f}" for k in sorted(row)
                                     if k.startswith("cpu") and k.endswith("_util"))
                    log(f"{test} r{rnd} {s:>8}: {row['requests_per_s']:.0f} req/s, {row['gb_per_s']:.3f} GB/s, "
                        f"{B.fmt(row['cpu_s_per_gb'], '.3f')} CPU-s/GB, p99 {B.fmt(row['p99_us'], '.0f')} µs, "
                        f"errors {row['errors']}, origin req/request "
                        f"{B.fmt(row['origin_requests_per_request'], '.2f')}, stored/request "
                        f"{B.fmt(row['stored_files_per_request'], '.2f')}; {cpus}"
                        + (f"; fill writes pooled {row['fill_writes_pooled_share']:.2f}"
                           if row.get("fill_writes_pooled_share") is not None else "")
                        + (f"; errors {row['error_kinds']}, statuses {row['statuses']}" if row["errors"] else ""))
    finally:
        for p in list(proxies.values()):
            B.stop(p.proc)
        B.stop(origin.proc)
        if DROP_CACHE_AFTER_ROUND & set(tests):
            # A run stopped inside such a round (error, Ctrl-C) leaves gigabytes behind.
            for s in servers:
                shutil.rmtree(cache_dir(cfg, s), ignore_errors=True)
        meta = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
            "kernel": os.uname().release, "cpus": os.cpu_count(), "cpu_model": B.cpu_model(),
            "nginx": B.nginx_version(cfg.nginx), "generator": cfg.generator, "rounds": cfg.rounds,
            "duration_s": cfg.duration, "warmup_s": cfg.warmup, "herd_rate": cfg.herd_rate,
            "herd_clients": cfg.herd_clients, "slice": SLICE, "linerate_args": cfg.linerate_args, "durability": cfg.durability,
            "nginx_open_file_cache": cfg.nginx_open_file_cache, "nginx_aio": cfg.nginx_aio,
            "nginx_workers": cfg.nginx_workers,
            "cache_fs": cfg.cache_fs,
            "cache_fs_options": cfg.cache_fs_options, "writeback": cfg.writeback,
            "warm_tests": {t: {"prefix": v[0], "count": v[1], "connections": v[2]} for t, v in WARM_TESTS.items()},
            "miss_tests": {t: {"prefix": v[0], "count": v[1], "connections": v[2]} for t, v in MISS_TESTS.items()},
            "failed": failed,
        }
        out_path.write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))
        log(f"results: {out_path}")
    print(report(rows, servers, failed))
    for s, why in failed.items():
        print(f"\n**{s}: FAILED** — {why}")
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
