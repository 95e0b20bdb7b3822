#!/usr/bin/env python3
"""zipf.py — a library larger than memory, and a slow disk (issue 20, parts 3 and 4).

What it owns: the procedure behind bench/zipf.sh. Three tests, each server on one core
(CPU 0) inside a cgroup v1 of its own, the load generator (`linerate bench`) on CPU 1:

  appliance  requests with Zipf popularity (exponent --zipf, 0.9) over a library of
             --objects files (2,800: 45 % 2 MiB, 30 % 1 MiB, 25 % 128 KiB, 3.4 GiB) served
             from disk, the server in a memory cgroup of --mem-limit (768 MiB: the
             library is 4.4x what the server may cache). Servers: nginx, nginx-aio
             (`aio threads`), linerate. Reports throughput, p99 of all requests and of
             the hot ones (the 1 % most popular objects, --hot-percent), disk reads per
             request and CPU per GB. kernel-sendfile and kernel-pipe (bench/kernel-server.c,
             built here with gcc) are the kernel's work alone, a thread per connection
             doing only the system calls of each response: the limit beside which the
             servers' figures are read.
  cache      the same requests through a cache in front of an nginx origin serving the
             library: nginx proxy_cache (slice 1m, proxy_cache_lock, open_file_cache,
             `aio threads`, `aio_write on`) and linerate cache mode. Each cache is filled
             with the whole library first (two passes, outside the cgroup; the second
             must not reach the origin), then moved into the memory cgroup; the origin
             must see no request during the measured window.
  slowdisk   bench.py's `cold` mix (16 connections on resident 64 KiB files, 4 on
             2 MiB files evicted every 100 ms) with the server's reads throttled by the
             blkio cgroup (--read-bps, 50 MiB/s), against the same hot load with no cold
             traffic: hot p99 with cold / hot p99 without (issue 20's target: <= 2x).

Page cache is charged to the cgroup that first touched it, so before every measured run
the files it reads are dropped from the page cache (`POSIX_FADV_DONTNEED` on each file,
which removes the pages and their charge whichever cgroup holds them) rather than with
`drop_caches`, which would empty the whole machine's cache under other people's work.
Each server is started, moved into the cgroup (every process: `cgroup.procs`, which
moves all threads), then the files are dropped, then the load starts; so everything the
server reads in the window is charged to its own limit.

Content (kept for reuse) under WORKDIR/zipf: lib/ (the library) and cold/ (the slowdisk
files: 2,000 x 64 KiB, 200 x 2 MiB; not bench.py's, which other runs may be reading).
Every process started is killed on exit; the cgroups it made are removed. Talks to
127.0.0.1 only. Standard library only; reuses bench.py's processes, /proc sampling and
generator code and proxy.py's origin and cache configurations.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as B  # noqa: E402
import proxy as P  # noqa: E402

CG_NAME = "linerate-bench-zipf"
CG_ROOT = Path("/sys/fs/cgroup")
ALL_TESTS = ["appliance", "cache", "slowdisk"]
APPLIANCE_SERVERS = ("nginx", "nginx-aio", "linerate", "kernel-sendfile", "kernel-pipe")
# The kernel's work alone (bench/kernel-server.c): a thread per connection doing only the
# system calls of a response; the limit a real server's figures are read against.
KERNEL_SERVERS = ("kernel-sendfile", "kernel-pipe")
CACHE_SERVERS = ("nginx-aio", "linerate")
CONTENT_VERSION = "1"
SIZES = (2 << 20, 1 << 20, 128 << 10)  # video segment (1080p / 720p) and a small one


def log(msg: str) -> None:
    print(f"[zipf] {msg}", file=sys.stderr, flush=True)


def object_size(i: int) -> int:
    """Size of object i: 45 % 2 MiB, 30 % 1 MiB, 25 % 128 KiB, mixed across ranks by a
    multiplicative hash so popularity and size are unrelated."""
    h = (i * 2654435761) % 100
    return SIZES[0] if h < 45 else SIZES[1] if h < 75 else SIZES[2]


# ----------------------------------------------------------------------------- content


def write_file(path: Path, size: int, tag: int, block: bytearray) -> None:
    stamp = tag.to_bytes(8, "little")
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(block))
            block[:8] = stamp
            f.write(memoryview(block)[:n])
            left -= n


def make_library(root: Path, count: int) -> None:
    marker = root / f".zipf-v{CONTENT_VERSION}-{count}"
    if marker.exists():
        log(f"library: reusing {root}")
        return
    total = sum(object_size(i) for i in range(count))
    log(f"library: writing {count} objects, {total / 2**30:.2f} GiB under {root}")
    shutil.rmtree(root, ignore_errors=True)
    (root / "v").mkdir(parents=True)
    block = bytearray(os.urandom(SIZES[0]))
    for i in range(count):
        write_file(root / "v" / f"{i}.bin", object_size(i), 30_000 + i, block)
    os.sync()
    marker.touch()


def make_cold_content(root: Path) -> None:
    marker = root / f".cold-v{CONTENT_VERSION}"
    if marker.exists():
        log(f"slowdisk content: reusing {root}")
        return
    log(f"slowdisk content: writing {B.SMALL_COUNT} x 64 KiB, {B.LARGE_COUNT} x 2 MiB under {root}")
    shutil.rmtree(root, ignore_errors=True)
    (root / "small").mkdir(parents=True)
    (root / "large").mkdir(parents=True)
    block = bytearray(os.urandom(B.LARGE_SIZE))
    for i in range(B.SMALL_COUNT):
        write_file(root / "small" / f"{i}.bin", B.SMALL_SIZE, i, block)
    for i in range(B.LARGE_COUNT):
        write_file(root / "large" / f"{i}.bin", B.LARGE_SIZE, 10_000 + i, block)
    os.sync()
    marker.touch()


def files_under(d: Path) -> list[Path]:
    return [Path(dp) / f for dp, _, fs in os.walk(d) for f in fs]


def drop(paths: list[Path]) -> None:
    """Drop these files' pages from the page cache (and their cgroup charge)."""
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# ------------------------------------------------------------------------------ cgroup


class Cgroup:
    """One cgroup v1 group in the memory and blkio hierarchies."""

    def __init__(self, name: str, dev: str):
        self.mem = CG_ROOT / "memory" / name
        self.blk = CG_ROOT / "blkio" / name
        self.dev = dev  # "MAJ:MIN" of the disk the content lives on
        for d in (self.mem, self.blk):
            d.mkdir(exist_ok=True)

    def limit(self, mem_bytes: int | None, read_bps: int | None = None, read_iops: int | None = None) -> None:
        (self.mem / "memory.limit_in_bytes").write_text(str(mem_bytes if mem_bytes else -1))
        (self.blk / "blkio.throttle.read_bps_device").write_text(f"{self.dev} {read_bps or 0}")
        (self.blk / "blkio.throttle.read_iops_device").write_text(f"{self.dev} {read_iops or 0}")

    def join(self, pids: list[int]) -> None:
        for d in (self.mem, self.blk):
            for pid in pids:
                (d / "cgroup.procs").write_text(str(pid))

    def reset(self) -> None:
        (self.blk / "blkio.reset_stats").write_text("1")
        (self.mem / "memory.max_usage_in_bytes").write_text("0")
        (self.mem / "memory.failcnt").write_text("0")

    def empty(self) -> None:
        """Reclaim what the group still holds (it has no tasks between runs)."""
        try:
            (self.mem / "memory.force_empty").write_text("0")
        except OSError:
            pass

    def blkio(self) -> dict:
        """Reads (bios at the throttle layer) and read bytes on the content's disk."""
        out = {"reads": 0, "read_bytes": 0}
        for fname, key in (("blkio.throttle.io_serviced", "reads"), ("blkio.throttle.io_service_bytes", "read_bytes")):
            for line in (self.blk / fname).read_text().splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0] == self.dev and parts[1] == "Read":
                    out[key] += int(parts[2])
        return out

    def mem_stat(self) -> dict:
        return {
            "usage": int((self.mem / "memory.usage_in_bytes").read_text()),
            "max_usage": int((self.mem / "memory.max_usage_in_bytes").read_text()),
            "limit": int((self.mem / "memory.limit_in_bytes").read_text()),
        }

    def remove(self) -> None:
        for d in (self.mem, self.blk):
            for _ in range(50):
                try:
                    if d.exists():
                        d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                log(f"could not remove cgroup {d} (tasks still in it?)")


def dev_of(path: Path) -> tuple[str, str]:
    """("MAJ:MIN", block device name) of the filesystem holding `path`."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    name = Path(f"/sys/dev/block/{dev}").resolve().name
    return dev, name


def disk_reads(name: str) -> tuple[int, int]:
    """(reads completed, sectors read) of the whole block device (/sys/block/DEV/stat)."""
    f = Path(f"/sys/block/{name}/stat").read_text().split()
    return int(f[0]), int(f[2])


def server_pids(server: B.Server) -> list[int]:
    """Every process of the server; for nginx, wait for the worker to exist."""
    deadline = time.monotonic() + 5
    while server.name.startswith("nginx") and not B.children_of(server.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.pids()


# ------------------------------------------------------- linerate's own view (metrics)

METRICS = {
    "linerate_worker_stall_seconds_total": "stall_s",
    "linerate_worker_stalls_total": "stalls",
    "linerate_disk_pool_sends_total": "pool_sends",
    "linerate_disk_pool_sent_bytes_total": "pool_bytes",
}


def admin_port(server: B.Server) -> int | None:
    """linerate's admin port: the other TCP port its process listens on (`ss`)."""
    try:
        out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if f"pid={server.proc.pid}," in line:
            port = int(line.split()[3].rsplit(":", 1)[1])
            if port != server.port:
                return port
    return None


def scrape(port: int) -> dict:
    """The METRICS counters (summed over their labels) and, per thread kind, the
    scheduler's on-CPU and runnable-waiting nanoseconds are read by the caller."""
    out = {v: 0.0 for v in METRICS.values()}
    try:
        with socket.create_connection((B.HOST, port), timeout=2) as s:
            s.sendall(f"GET /metrics HTTP/1.1\r\nHost: {B.HOST}:{port}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(1 << 16):
                data += chunk
    except OSError:
        return out
    for line in data.decode(errors="replace").splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in METRICS:
            try:
                out[METRICS[name]] += float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return out


def sched(pid: int) -> dict:
    """Seconds on the CPU and runnable but waiting for it, summed per thread kind
    (linerate's worker `linerate-w0`, its disk-pool threads `linerate-cold*`)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            run, wait, _ = (int(x) for x in (task / "schedstat").read_text().split())
        except (OSError, ValueError):
            continue
        kind = "worker" if "-w" in comm else "pool" if "cold" in comm else None
        if kind:
            out[f"{kind}_cpu_s"] = out.get(f"{kind}_cpu_s", 0.0) + run / 1e9
            out[f"{kind}_wait_s"] = out.get(f"{kind}_wait_s", 0.0) + wait / 1e9
    return out


# ------------------------------------------------------------------------------- runs


def zipf_args(cfg) -> list[str]:
    return [
        "--workload", "files", "--prefix", "/v/", "--count", str(cfg.objects), "--suffix", ".bin",
        "--zipf", str(cfg.zipf), "--hot-count", str(cfg.hot_count), "--seed", "1",
        "--connections", str(cfg.connections), "--duration", str(cfg.duration), "--warmup", str(cfg.warmup),
    ]


def zipf_run(cfg, cg: Cgroup, server: B.Server, test: str, rnd: int, drop_also: list[Path]) -> dict:
    """One measured Zipf run against a started server: into the cgroup, drop the
    content's pages, load, sample disk and cgroup counters at the window's edges."""
    cg.join(server_pids(server))
    drop(cfg.lib_files + drop_also)
    cg.reset()
    marks: dict[str, tuple] = {}
    port = admin_port(server) if server.name == "linerate" else None
    own: dict[str, dict] = {}

    def on_event(kind: str) -> None:
        marks[kind] = (disk_reads(cfg.dev_name), cg.blkio(), time.monotonic())
        if port:
            own[kind] = {**scrape(port), **sched(server.proc.pid)}

    run = B.run_generator(cfg, server, zipf_args(cfg), on_event=on_event)
    row = B.summarize(server, test, rnd, run)
    hot = run.result.get("hot_latency_us") or {}
    row["hot_p50_us"], row["hot_p99_us"], row["hot_requests"] = hot.get("p50"), hot.get("p99"), hot.get("count")
    if "measure_start" in marks and "measure_end" in marks:
        (d0, s0), b0, _ = marks["measure_start"]
        (d1, s1), b1, _ = marks["measure_end"]
        n = run.result["requests"] or 1
        row["disk_reads_per_request"] = (d1 - d0) / n
        row["disk_mib_per_request"] = (s1 - s0) * 512 / n / 2**20
        row["cg_reads_per_request"] = (b1["reads"] - b0["reads"]) / n
        row["cg_read_mib_per_request"] = (b1["read_bytes"] - b0["read_bytes"]) / n / 2**20
        body = run.result["body_bytes"] or 1
        row["read_share_of_sent"] = (b1["read_bytes"] - b0["read_bytes"]) / body
        if len(own) == 2:
            # linerate's own account of the window, per second of it: event-loop stall
            # time, the share of the bytes its disk pool sent, and how the one core
            # was split between the worker and the pool threads.
            secs = marks["measure_end"][2] - marks["measure_start"][2]
            for k in own["measure_end"]:
                d = own["measure_end"][k] - own["measure_start"].get(k, 0.0)
                row[f"lr_{k}"] = d / secs if k.endswith("_s") or k == "stalls" else d
            row["lr_pool_share_of_sent"] = row.pop("lr_pool_bytes") / body
    row.update({f"mem_{k}": v for k, v in cg.mem_stat().items()})
    return row


def build_kernel_server(cfg) -> str:
    """bench/kernel-server.c, compiled into the work directory."""
    src = Path(__file__).resolve().parent / "kernel-server.c"
    out = cfg.workdir / "kernel-server"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-pthread", "-o", str(out), str(src)], check=True)
    return str(out)


def start_kernel_server(cfg, name: str, port: int) -> B.Server:
    way = name.removeprefix("kernel-")
    with open(cfg.workdir / "kernel-server-stderr.log", "ab") as log_file:
        p = B.spawn(["taskset", "-c", str(cfg.server_cpu), cfg.kernel_server, B.HOST, str(port), str(cfg.root), way],
                    stdout=log_file, stderr=log_file)
    B.wait_listening(port, p)
    return B.Server(name, p, port)


def appliance_run(cfg, cg: Cgroup, name: str, rnd: int) -> dict:
    cg.empty()
    cg.limit(cfg.mem_limit)
    port = B.free_port()
    server = start_kernel_server(cfg, name, port) if name in KERNEL_SERVERS else B.start_server(cfg, name, port)
    try:
        return zipf_run(cfg, cg, server, "appliance", rnd, [])
    finally:
        B.stop(server.proc)


def slowdisk_run(cfg, cg: Cgroup, name: str, rnd: int, with_cold: bool) -> dict:
    cg.empty()
    cg.limit(None, cfg.read_bps, cfg.read_iops)
    # The hot files are resident and the cold ones are evicted all along: nothing to
    # fill, so bench.py's 2 s warm-up rather than the Zipf tests' longer one.
    saved_root, cfg.root = cfg.root, cfg.cold_root
    saved_warmup, cfg.warmup = cfg.warmup, cfg.slowdisk_warmup
    server = B.start_server(cfg, name, B.free_port())
    try:
        cg.join(server_pids(server))
        B.warm(B.small_paths(cfg.root))
        cg.reset()
        b0, t0 = cg.blkio(), time.monotonic()  # deltas: reset_stats leaves the throttle counters
        if with_cold:
            row = B.cold_run(cfg, server, rnd)
        else:
            args = B.files_args(cfg, "/small/", B.SMALL_COUNT, B.CONNECTIONS["cold"])
            row = B.summarize(server, "slowdisk", rnd, B.run_generator(cfg, server, args))
        elapsed = time.monotonic() - t0
        b1 = cg.blkio()
        got = b1["read_bytes"] - b0["read_bytes"]
        row.update(workload="slowdisk", with_cold=with_cold, cg_reads=b1["reads"] - b0["reads"], cg_read_bytes=got,
                   cg_read_mb_per_s=got / 1e6 / elapsed)
        return row
    finally:
        B.stop(server.proc)
        cfg.root = saved_root
        cfg.warmup = saved_warmup


def quiet(cfg) -> None:
    if cfg.wait_quiet > 0:
        B.wait_quiet(cfg.max_other_load, cfg.wait_quiet)


def retrying(cfg, fn, label: str) -> dict:
    row: dict = {}
    for attempt in range(1 + cfg.retries):
        quiet(cfg)
        row = fn()
        row["attempt"] = attempt
        row["loadavg"] = os.getloadavg()[0]
        if row.get("other_load", 0) <= cfg.max_other_load or attempt == cfg.retries:
            break
        log(f"{label}: other load {row['other_load']:.2f} > {cfg.max_other_load}; again")
    return row


def log_row(label: str, r: dict) -> None:
    log(f"{label}: {r['requests_per_s']:.0f} req/s, {r['gb_per_s']:.3f} GB/s, "
        f"{B.fmt(r.get('cpu_s_per_gb'), '.3f')} CPU-s/GB, server CPU {B.fmt(r.get('server_cpu_util'), '.2f')}, "
        f"p99 {B.fmt(r.get('p99_us'), '.0f')} µs, hot p99 {B.fmt(r.get('hot_p99_us'), '.0f')} µs, "
        f"disk reads/req {B.fmt(r.get('disk_reads_per_request'), '.2f')}, "
        f"read MiB/req {B.fmt(r.get('cg_read_mib_per_request'), '.2f')}, errors {r.get('errors')}, "
        f"origin {r.get('origin_requests', '-')}, other load {B.fmt(r.get('other_load'), '.2f')}"
        + (f"; linerate: stall {r['lr_stall_s']:.2f} s/s, pool sent {r['lr_pool_share_of_sent']:.2f} of bytes, "
           f"worker cpu {r.get('lr_worker_cpu_s', 0):.2f} wait {r.get('lr_worker_wait_s', 0):.2f}, pool cpu "
           f"{r.get('lr_pool_cpu_s', 0):.2f} wait {r.get('lr_pool_wait_s', 0):.2f} (s/s)" if "lr_stall_s" in r else ""))


# ------------------------------------------------------------------------------ cache


def cache_test(cfg, cg: Cgroup, rows: list[dict]) -> None:
    """Fill each cache with the whole library, move it into the cgroup, measure."""
    cfg.root = cfg.lib_root
    cfg.pwork = cfg.workdir / "proxy"
    cfg.pwork.mkdir(exist_ok=True)
    cfg.nginx_aio = True
    cfg.herd_rate = "20m"
    origin = P.start_origin(cfg)
    proxies: dict[str, B.Server] = {}
    fills: dict[str, dict] = {}
    paths = [f"/v/{i}.bin" for i in range(cfg.objects)]
    try:
        for s in cfg.cache_servers:
            proxies[s] = (P.start_nginx_proxy if s.startswith("nginx") else P.start_linerate_proxy)(cfg, origin)
            proxies[s].name = s
            t = time.monotonic()
            n0 = len(P.read_origin_log(origin))
            bad = P.fetch_all_once(proxies[s].port, paths)
            P.wait_origin_idle(origin, 30)
            n1 = len(P.read_origin_log(origin))
            bad += P.fetch_all_once(proxies[s].port, paths)
            P.wait_origin_idle(origin, 30)
            n2 = len(P.read_origin_log(origin))
            os.sync()  # the cache files' pages must be clean to be dropped
            fills[s] = {"fill_s": time.monotonic() - t, "fill_not_200": bad,
                        "fill_first_pass_origin_requests": n1 - n0, "fill_second_pass_origin_requests": n2 - n1}
            log(f"cache {s}: filled in {fills[s]['fill_s']:.0f} s, {bad} not 200, origin requests "
                f"{n1 - n0} then {n2 - n1} (want 0)")
            cg.join(server_pids(proxies[s]))
        cg.limit(cfg.mem_limit)
        cache_dirs = [cfg.pwork / ("nginx" if s.startswith("nginx") else "linerate") / "cache" for s in cfg.cache_servers]
        # The kernel's work alone for the same bytes (bench/kernel-server.c on the
        # library), in the same group beside the idle caches: no cache can serve them
        # with less, so its rate is the limit of this test too.
        order = cfg.cache_servers + cfg.cache_kernel_servers
        for rnd in range(cfg.rounds):
            for s in order if rnd % 2 == 0 else list(reversed(order)):
                def one(s=s, rnd=rnd):
                    before = sum(1 for l in P.read_origin_log(origin) if l.uri.startswith("/v/"))
                    files = [f for d in cache_dirs for f in files_under(d)]
                    if s in KERNEL_SERVERS:
                        server = start_kernel_server(cfg, s, B.free_port())
                        try:
                            row = zipf_run(cfg, cg, server, "cache", rnd, files)
                        finally:
                            B.stop(server.proc)
                        row["origin_requests"] = 0
                        return row
                    row = zipf_run(cfg, cg, proxies[s], "cache", rnd, files)
                    P.wait_origin_idle(origin, 5)
                    row["origin_requests"] = sum(1 for l in P.read_origin_log(origin) if l.uri.startswith("/v/")) - before
                    row.update(fills[s])
                    return row
                row = retrying(cfg, one, f"cache r{rnd} {s}")
                rows.append(row)
                log_row(f"cache r{rnd} {s:>9}", row)
    finally:
        for p in proxies.values():
            B.stop(p.proc)
        B.stop(origin.proc)
        if not cfg.keep_caches:
            for s in ("nginx", "linerate"):
                shutil.rmtree(cfg.pwork / s, ignore_errors=True)


# ----------------------------------------------------------------------------- report


def med(rows, key):
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    return statistics.median(vals) if vals else None


ZIPF_COLUMNS = [
    ("requests_per_s", "req/s", ",.0f", True),
    ("gb_per_s", "GB/s", ".3f", True),
    ("cpu_s_per_gb", "server CPU-s/GB", ".3f", True),
    ("server_cpu_util", "server CPU", ".2f", False),
    ("p50_us", "p50 µs", ",.0f", True),
    ("p99_us", "p99 µs", ",.0f", True),
    ("hot_p99_us", "hot p99 µs", ",.0f", True),
    ("disk_reads_per_request", "disk reads/req", ".2f", True),
    ("cg_read_mib_per_request", "read MiB/req", ".3f", True),
    ("origin_requests", "origin req", ".0f", False),
    ("errors", "errors", ".0f", False),
    ("other_load", "other load", ".2f", False),
]


def zipf_table(rows: list[dict], test: str, servers) -> list[str]:
    rs = [r for r in rows if r["workload"] == test]
    if not rs:
        return []
    cols = [c for c in ZIPF_COLUMNS if any(r.get(c[0]) is not None for r in rs)]
    lines = [f"| {test} | " + " | ".join(c[1] for c in cols) + " |", "|---|" + "---:|" * len(cols)]
    meds = {}
    for s in servers:
        srs = [r for r in rs if r["server"] == s]
        if not srs:
            continue
        meds[s] = {c[0]: med(srs, c[0]) for c in cols}
        lines.append(f"| {s} | " + " | ".join(B.fmt(meds[s][c[0]], c[2]) for c in cols) + " |")
    for other in [s for s in servers if s != "linerate" and s in meds]:
        if "linerate" not in meds:
            break
        cells = []
        for key, _, _, ratio in cols:
            a, b = meds["linerate"].get(key), meds[other].get(key)
            cells.append(f"{a / b:.2f}×" if ratio and a is not None and b else "")
        lines.append(f"| **linerate/{other}** | " + " | ".join(cells) + " |")
        per = []
        for rnd in sorted({r["round"] for r in rs}):
            a = [r for r in rs if r["round"] == rnd and r["server"] == "linerate"]
            b = [r for r in rs if r["round"] == rnd and r["server"] == other]
            if a and b and b[0]["requests_per_s"] and b[0].get("cpu_s_per_gb"):
                per.append(f"r{rnd} {a[0]['requests_per_s'] / b[0]['requests_per_s']:.2f}× req/s, "
                           f"{a[0]['cpu_s_per_gb'] / b[0]['cpu_s_per_gb']:.2f}× CPU/GB")
        if per:
            lines.append(f"| per round vs {other} | " + "; ".join(per) + " |" + " |" * (len(cols) - 1))
    for k in [k for k in KERNEL_SERVERS if k in meds]:
        # Each server against the kernel's work alone: how much of the limit it reaches.
        kr = meds[k].get("requests_per_s")
        cells = [f"{s} {meds[s]['requests_per_s'] / kr:.2f}×" for s in meds
                 if s not in KERNEL_SERVERS and kr and meds[s].get("requests_per_s")]
        if cells:
            lines.append(f"| req/s as a share of {k} (the kernel's work alone) | " + "; ".join(cells) + " |"
                         + " |" * (len(cols) - 1))
    for s in servers:
        bad = [r for r in rs if r["server"] == s and (r.get("origin_requests") or r.get("fill_not_200")
                                                     or r.get("fill_second_pass_origin_requests") or r.get("errors"))]
        if bad:
            lines.append(f"| **{s}: errors, a fill that was not all 200s or not all hits on its second pass, "
                         f"or origin requests in the window** |" + " |" * len(cols))
    lr = [r for r in rs if r["server"] == "linerate" and "lr_stall_s" in r]
    if lr:
        lines.append(
            f"| linerate's own account (medians, per second of window) | event-loop stall "
            f"{med(lr, 'lr_stall_s'):.2f} s ({med(lr, 'lr_stalls'):.0f} stalls); disk pool sent "
            f"{med(lr, 'lr_pool_share_of_sent'):.2f} of the bytes; worker on CPU {med(lr, 'lr_worker_cpu_s'):.2f} s, "
            f"runnable but waiting {med(lr, 'lr_worker_wait_s'):.2f} s; pool threads on CPU "
            f"{med(lr, 'lr_pool_cpu_s'):.2f} s, waiting {med(lr, 'lr_pool_wait_s'):.2f} s |" + " |" * (len(cols) - 1))
    return lines


def slowdisk_table(rows: list[dict], servers) -> list[str]:
    rs = [r for r in rows if r["workload"] == "slowdisk"]
    if not rs:
        return []
    lines = ["| slowdisk | hot req/s, no cold | hot p99 µs, no cold | hot req/s, with cold | hot p99 µs, with cold "
             "| **p99 with / without** | cold req/s | cold p99 µs | disk MB/s (cgroup) | server CPU | other load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in servers:
        a = [r for r in rs if r["server"] == s and not r["with_cold"]]
        b = [r for r in rs if r["server"] == s and r["with_cold"]]
        if not a or not b:
            continue
        pa, pb = med(a, "p99_us"), med(b, "p99_us")
        per = [f"{y['p99_us'] / x['p99_us']:.2f}" for x in a for y in b if x["round"] == y["round"]]
        lines.append(
            f"| {s} | {med(a, 'requests_per_s'):,.0f} | {pa:,.0f} | {med(b, 'requests_per_s'):,.0f} | {pb:,.0f} | "
            f"**{pb / pa:.2f}×** (rounds {', '.join(per)}) | {B.fmt(med(b, 'cold_requests_per_s'), '.0f')} | "
            f"{B.fmt(med(b, 'cold_p99_us'), ',.0f')} | {B.fmt(med(b, 'cg_read_mb_per_s'), '.0f')} | "
            f"{B.fmt(med(b, 'server_cpu_util'), '.2f')} | {B.fmt(max(r['other_load'] for r in a + b), '.2f')} |")
    return lines


# -------------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tests", default=",".join(ALL_TESTS), help="comma list of " + ", ".join(ALL_TESTS))
    ap.add_argument("--servers", default="nginx,nginx-aio,linerate",
                    help="appliance and slowdisk servers (bench.py's names); cache mode always runs "
                         "nginx-aio (proxy_cache) and linerate when listed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=8.0,
                    help="generator warm-up per run: the cgroup starts empty and fills in it (8 s)")
    ap.add_argument("--slowdisk-warmup", type=float, default=2.0, help="generator warm-up per slowdisk run (2 s)")
    ap.add_argument("--objects", type=int, default=2800)
    ap.add_argument("--zipf", type=float, default=0.9, help="Zipf exponent of the popularity (0.9)")
    ap.add_argument("--hot-percent", type=float, default=1.0,
                    help="'hot' = this share of the objects, the most popular (1 %%)")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--mem-limit", default="768M", help="memory cgroup limit per server (768M)")
    ap.add_argument("--read-bps", default="50M", help="slowdisk: blkio read_bps_device throttle (50M bytes/s)")
    ap.add_argument("--read-iops", type=int, default=0, help="slowdisk: blkio read_iops_device throttle (0 = none)")
    ap.add_argument("--max-other-load", type=float, default=0.10)
    ap.add_argument("--wait-quiet", type=float, default=0.0)
    ap.add_argument("--retries", type=int, default=0)
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path("/var/tmp/linerate-bench/zipf"))
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--linerate", default="target/release/linerate")
    ap.add_argument("--nginx-open-files", type=int, default=16384)
    ap.add_argument("--nginx-open-file-cache", type=int, default=P.NGINX_OPEN_FILE_CACHE)
    ap.add_argument("--linerate-config", default=None, help="appliance and slowdisk: passed to linerate serve --config")
    ap.add_argument("--keep-caches", action="store_true", help="keep the filled caches after the cache test")
    ap.add_argument("--generator", default=None)
    ap.add_argument("--out", type=Path, default=None)
    cfg = ap.parse_args()
    tests = [t for t in cfg.tests.split(",") if t]
    servers = [s for s in cfg.servers.split(",") if s]
    for t in tests:
        if t not in ALL_TESTS:
            ap.error(f"unknown test {t}")
    for s in servers:
        if (s not in B.SERVERS and s not in KERNEL_SERVERS) or s == "linerate-base":
            ap.error(f"unknown server {s}")
    cfg.mem_limit = parse_size(cfg.mem_limit)
    cfg.read_bps = parse_size(cfg.read_bps)
    cfg.hot_count = max(1, round(cfg.objects * cfg.hot_percent / 100))
    cfg.cache_servers = [s for s in CACHE_SERVERS if s in servers]
    cfg.cache_kernel_servers = [s for s in KERNEL_SERVERS if s in servers]
    # bench.py / proxy.py settings their functions read from cfg.
    cfg.linerate_base = None
    cfg.linerate_args = []
    cfg.idle_settle = 0.0
    cfg.origin_cpu = cfg.client_cpu
    cfg.generator = cfg.generator.split() if cfg.generator else B.default_generator(cfg.linerate)
    cfg.workdir = cfg.workdir.resolve()
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    cfg.kernel_server = build_kernel_server(cfg) if any(s in KERNEL_SERVERS for s in servers) else None
    cfg.lib_root = cfg.workdir / "lib"
    cfg.cold_root = cfg.workdir / "cold"
    cfg.root = cfg.lib_root
    out_path = cfg.out or cfg.workdir / "zipf-results.json"

    signal.signal(signal.SIGTERM, B.on_signal)
    signal.signal(signal.SIGHUP, B.on_signal)
    os.sched_setaffinity(0, {cfg.client_cpu})

    if "appliance" in tests or "cache" in tests:
        make_library(cfg.lib_root, cfg.objects)
    if "slowdisk" in tests:
        make_cold_content(cfg.cold_root)
    cfg.dev, cfg.dev_name = dev_of(cfg.workdir)
    cfg.lib_files = [cfg.lib_root / "v" / f"{i}.bin" for i in range(cfg.objects)]
    lib_bytes = sum(object_size(i) for i in range(cfg.objects))
    cg = Cgroup(CG_NAME, cfg.dev)
    atexit.register(cg.remove)  # runs after stop_all (atexit is last in, first out)
    atexit.register(B.stop_all)
    log(f"disk {cfg.dev_name} ({cfg.dev}); library {cfg.objects} objects, {lib_bytes / 2**30:.2f} GiB, "
        f"memory limit {cfg.mem_limit / 2**20:.0f} MiB ({lib_bytes / cfg.mem_limit:.1f}x); Zipf {cfg.zipf}, "
        f"hot = top {cfg.hot_count} objects; servers {servers}; tests {tests}; load average {os.getloadavg()}")

    rows: list[dict] = []
    started = time.time()
    try:
        if "appliance" in tests:
            for rnd in range(cfg.rounds):
                order = [s for s in servers if s in APPLIANCE_SERVERS]
                for s in order if rnd % 2 == 0 else list(reversed(order)):
                    row = retrying(cfg, lambda s=s, rnd=rnd: appliance_run(cfg, cg, s, rnd), f"appliance r{rnd} {s}")
                    rows.append(row)
                    log_row(f"appliance r{rnd} {s:>9}", row)
        if "cache" in tests and cfg.cache_servers:
            cache_test(cfg, cg, rows)
        if "slowdisk" in tests:
            slow = [s for s in servers if s not in KERNEL_SERVERS]  # the limit is the appliance test's
            for rnd in range(cfg.rounds):
                for s in slow if rnd % 2 == 0 else list(reversed(slow)):
                    for with_cold in (False, True):
                        row = retrying(cfg, lambda s=s, rnd=rnd, w=with_cold: slowdisk_run(cfg, cg, s, rnd, w),
                                       f"slowdisk r{rnd} {s}")
                        rows.append(row)
                        log(f"slowdisk r{rnd} {s:>9} {'cold' if with_cold else 'none'}: hot {row['requests_per_s']:.0f} "
                            f"req/s, p50 {row['p50_us']:.0f} / p99 {row['p99_us']:.0f} µs; cold "
                            f"{B.fmt(row.get('cold_requests_per_s'), '.0f')} req/s p99 "
                            f"{B.fmt(row.get('cold_p99_us'), '.0f')} µs; disk {row['cg_read_mb_per_s']:.0f} MB/s; "
                            f"server CPU {row['server_cpu_util']:.2f}; other load {row['other_load']:.2f}")
    finally:
        meta = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
            "kernel": os.uname().release, "cpus": os.cpu_count(), "cpu_model": B.cpu_model(),
            "nginx": B.nginx_version(cfg.nginx), "generator": cfg.generator, "rounds": cfg.rounds,
            "duration_s": cfg.duration, "warmup_s": cfg.warmup, "objects": cfg.objects,
            "library_bytes": lib_bytes, "mem_limit": cfg.mem_limit, "zipf": cfg.zipf, "hot_count": cfg.hot_count,
            "connections": cfg.connections, "read_bps": cfg.read_bps, "read_iops": cfg.read_iops,
            "disk": cfg.dev_name,
        }
        out_path.write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))
        log(f"results: {out_path}")
    lines = zipf_table(rows, "appliance", servers) + [""] + zipf_table(rows, "cache", cfg.cache_servers + cfg.cache_kernel_servers) + [""] \
        + slowdisk_table(rows, servers)
    print("\n".join(lines).strip())
    return 0


def parse_size(s: str) -> int:
    s = s.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s.rstrip("KMG")) * mult)


if __name__ == "__main__":
    sys.exit(main())
