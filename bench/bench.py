#!/usr/bin/env python3
"""bench.py — linerate vs nginx, one server core each, on 127.0.0.1.

What it owns: the benchmark procedure behind bench/run.sh (which builds the binaries,
installs nginx when missing and raises the fd limit, then calls this). It generates the
content, starts each server pinned to one CPU and the load generator pinned to another,
alternates servers round by round, samples server CPU time and memory from /proc at the
generator's measure_start / measure_end / idle_ready events, and prints the medians and
the linerate/nginx ratios. Results (every run, not just medians) go to a JSON file.

What it does not do: build anything, install packages, or send traffic anywhere but
127.0.0.1. Every process it starts is in its own session and is killed (SIGTERM, then
SIGKILL) on exit, including on Ctrl-C and SIGTERM.

Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import atexit
import json
import resource
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
HOST = "127.0.0.1"  # the only address this script ever talks to

# Content layout (paths are relative to the served root). Sizes per the brief: many
# small segments, fewer large ones, one big file read by ranges.
SMALL_COUNT, SMALL_SIZE = 2000, 64 * 1024
LARGE_COUNT, LARGE_SIZE = 200, 2 * 1024 * 1024
HUGE_SIZE = 1024 * 1024 * 1024
RANGE_SIZE = 1024 * 1024
CONTENT_VERSION = "1"  # bump when the layout changes so old content is regenerated

# Active connections per workload: enough requests in flight to keep one server core
# busy (each connection has one), few enough that queueing does not dominate latency.
CONNECTIONS = {"small": 64, "large": 16, "ranges": 16, "idle": 16, "cold": 16, "generator": 16}
COLD_CONNECTIONS = 4  # cold-request connections alongside the hot ones in "cold"
EVICT_EVERY_S = 0.1  # how often the cold set is evicted again during "cold"

ALL_WORKLOADS = ["small", "large", "ranges", "idle", "cold"]
OPTIONAL_WORKLOADS = ["generator"]  # wrk vs linerate-bench against nginx

children: list[subprocess.Popen] = []


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- processes


def spawn(cmd: list[str], **kw) -> subprocess.Popen:
    """Start a child in its own session (so it and its children can be killed as a group)."""
    p = subprocess.Popen(cmd, start_new_session=True, **kw)
    children.append(p)
    return p


def stop(p: subprocess.Popen, grace: float = 5.0) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    if p in children:
        children.remove(p)


def stop_all() -> None:
    for p in list(children):
        stop(p, grace=3.0)


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


# ------------------------------------------------------------------------------- /proc


def proc_ticks(pids: list[int]) -> int:
    """utime + stime of the processes (all their threads), in clock ticks."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])  # fields 14, 15 of stat(5)
    return total


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def children_of(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            pass
    return out


def system_busy_ticks() -> int:
    """All CPUs' non-idle time (user+nice+system+irq+softirq+steal), in ticks."""
    f = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f[:8])
    return user + nice + system + irq + softirq + steal


def per_cpu_busy_ticks() -> dict[int, int]:
    """Each CPU's non-idle time in ticks (the cpuN lines of /proc/stat)."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines()[1:]:
        if not line.startswith("cpu"):
            break
        name, *f = line.split()
        user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f[:8])
        out[int(name[3:])] = user + nice + system + irq + softirq + steal
    return out


QUIET_FOR_S = 3  # consecutive quiet seconds wanted before a run: builds come in bursts


def wait_quiet(max_load: float, max_wait: float) -> float:
    """Wait until others' CPU use stayed below `max_load` cores for QUIET_FOR_S seconds
    in a row (builds and tests of other jobs share this machine), at most `max_wait`
    seconds. Returns the last one-second load seen."""
    deadline = time.monotonic() + max_wait
    announced = False
    quiet = 0
    while True:
        b0, t0 = system_busy_ticks(), time.monotonic()
        time.sleep(1.0)
        load = (system_busy_ticks() - b0) / CLK_TCK / (time.monotonic() - t0)
        quiet = quiet + 1 if load <= max_load else 0
        if quiet >= QUIET_FOR_S or time.monotonic() >= deadline:
            if announced:
                log(f"machine load now {load:.2f} cores" + ("" if quiet >= QUIET_FOR_S else " (gave up waiting)"))
            return load
        if not announced and load > max_load:
            log(f"machine busy ({load:.2f} cores in use by others); waiting up to {max_wait:.0f} s")
            announced = True


# ----------------------------------------------------------------------------- content


def make_content(root: Path) -> None:
    """Write the benchmark files (real data, not sparse), unless already there."""
    marker = root / f".content-v{CONTENT_VERSION}"
    if marker.exists():
        log(f"content: reusing {root}")
        return
    log(f"content: writing {SMALL_COUNT} x 64 KiB, {LARGE_COUNT} x 2 MiB, 1 x 1 GiB under {root}")
    shutil.rmtree(root, ignore_errors=True)
    (root / "small").mkdir(parents=True)
    (root / "large").mkdir(parents=True)
    block = bytearray(os.urandom(LARGE_SIZE))

    def write(path: Path, size: int, tag: int) -> None:
        # Stamp the file number into the data so no two files are identical.
        stamp = tag.to_bytes(8, "little")
        with open(path, "wb") as f:
            left = size
            while left:
                n = min(left, len(block))
                block[:8] = stamp
                f.write(memoryview(block)[:n])
                left -= n

    for i in range(SMALL_COUNT):
        write(root / "small" / f"{i}.bin", SMALL_SIZE, i)
    for i in range(LARGE_COUNT):
        write(root / "large" / f"{i}.bin", LARGE_SIZE, 10_000 + i)
    with open(root / "huge.bin", "wb") as f:
        for i in range(HUGE_SIZE // LARGE_SIZE):
            block[:8] = (20_000 + i).to_bytes(8, "little")
            f.write(block)
    os.sync()
    marker.touch()


def warm(paths: list[Path]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(8 << 20):
                pass


def evict(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def small_paths(root: Path) -> list[Path]:
    return [root / "small" / f"{i}.bin" for i in range(SMALL_COUNT)]


def large_paths(root: Path) -> list[Path]:
    return [root / "large" / f"{i}.bin" for i in range(LARGE_COUNT)]


# ----------------------------------------------------------------------------- servers


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before listening")
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server not listening on {HOST}:{port} after {timeout} s")


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    port: int

    def pids(self) -> list[int]:
        """The process and its children (nginx: master + worker)."""
        return [self.proc.pid] + children_of(self.proc.pid)

    def rss_pid(self) -> int:
        """Whose memory the idle workload reads: nginx's worker, linerate's process."""
        kids = children_of(self.proc.pid)
        return kids[0] if self.name.startswith("nginx") and kids else self.proc.pid


NGINX_CONF = """\
# Generated by bench/bench.py. One worker, pinned by taskset, tuned like a video edge:
# sendfile, no access log, unlimited keep-alive, enough connections for the idle test,
# and an open-file cache the size of linerate's (revalidated after 1 s, as linerate's
# stat-based entries are), or none for the "nginx-stock" server; "nginx-aio" adds
# `aio threads;` (sendfile of pages not in memory moved to a thread pool).
worker_processes 1;
daemon off;
master_process on;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
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
    }}
}}
"""


def nginx_open_file_cache(entries: int) -> str:
    """nginx's open-file cache directives for the `http` block (also bench/proxy.py's):
    `entries` files revalidated after 1 s, as linerate checks its kept files; 0 = off."""
    if entries <= 0:
        return "    open_file_cache off;"
    return f"    open_file_cache max={entries} inactive=60s;\n    open_file_cache_valid 1s;"


def start_nginx(cfg, port: int, stock: bool = False, aio: bool = False) -> Server:
    """nginx as configured above; `stock`: without the open-file cache (nginx's default,
    the configuration issue 13's baseline figures were measured against); `aio`: with
    `aio threads;` (how operators of a library larger than memory run it; issue 20)."""
    work = cfg.workdir
    (work / "tmp").mkdir(exist_ok=True)
    nofile = hard_nofile()
    conf = work / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            work=work,
            host=HOST,
            port=port,
            root=cfg.root,
            nofile=nofile,
            worker_connections=max(1024, nofile - 100),
            open_file_cache=nginx_open_file_cache(0 if stock else cfg.nginx_open_files),
            aio="    aio threads;" if aio else "",
        )
    )
    with open(work / "nginx-stderr.log", "ab") as log_file:  # the child keeps its own copy
        p = spawn(
            ["taskset", "-c", str(cfg.server_cpu), cfg.nginx, "-c", str(conf), "-p", str(work)],
            stdout=log_file,
            stderr=log_file,
        )
    wait_listening(port, p)
    return Server("nginx-stock" if stock else "nginx-aio" if aio else "nginx", p, port)


def start_linerate(cfg, port: int, binary: str | None = None, name: str = "linerate") -> Server:
    cmd = [
        "taskset", "-c", str(cfg.server_cpu), binary or cfg.linerate, "serve",
        "--listen", f"{HOST}:{port}", "--root", str(cfg.root), "--workers", "1",
    ]
    if cfg.linerate_config:
        cmd += ["--config", cfg.linerate_config]
    with open(cfg.workdir / "linerate-stderr.log", "ab") as log_file:  # the child keeps its own copy
        p = spawn(cmd, stdout=log_file, stderr=log_file)
    wait_listening(port, p)
    return Server(name, p, port)


def start_server(cfg, name: str, port: int) -> Server:
    """One of SERVERS by name."""
    if name == "nginx":
        return start_nginx(cfg, port)
    if name == "nginx-stock":
        return start_nginx(cfg, port, stock=True)
    if name == "nginx-aio":
        return start_nginx(cfg, port, aio=True)
    if name == "linerate-base":
        return start_linerate(cfg, port, cfg.linerate_base, "linerate-base")
    return start_linerate(cfg, port)


# Servers a run can compare. linerate's figures are divided by each other one's.
SERVERS = ("nginx", "nginx-stock", "nginx-aio", "linerate", "linerate-base")


def hard_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return hard if hard != resource.RLIM_INFINITY else 65536


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- generator


@dataclass
class GenRun:
    """One generator process and what was sampled at its events."""

    result: dict = field(default_factory=dict)
    server_ticks: int = 0
    client_ticks: int = 0
    busy_ticks: int = 0
    self_ticks: int = 0  # this script's own CPU (evictor included) in the window
    window_s: float = 0.0
    # Each CPU's busy fraction over the window (1.0 = saturated): shows a saturated
    # load-generator core, which would make the server's figure the generator's.
    cpu_util: dict = field(default_factory=dict)
    rss_before_kb: int = 0
    rss_after_kb: int = 0


def run_generator(cfg, server: Server, args: list[str], rss_pid: int | None = None,
                  on_event=None) -> GenRun:
    """Run one generator, pinned to the client CPU, sampling /proc at its events.
    `on_event(kind)`, when given, is called at measure_start and measure_end too, so a
    caller can sample what it measures (bench/zipf.py: disk and cgroup counters)."""
    cmd = ["taskset", "-c", str(cfg.client_cpu)] + cfg.generator + [
        "--target", f"{HOST}:{server.port}", "--events",
    ] + args
    run = GenRun()
    if rss_pid is not None:
        run.rss_before_kb = rss_kb(rss_pid)
    p = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start = {}
    last = None
    assert p.stdout is not None
    for line in p.stdout:
        line = line.strip()
        if not line.startswith("{"):
            continue
        ev = json.loads(line)
        kind = ev.get("event")
        if kind == "idle_ready" and rss_pid is not None:
            # Read RSS once the connections have been idle for most of the settle time
            # (same for both servers): a player's connection is idle for seconds between
            # segment fetches, and linerate parks a connection idle for 1 s
            # (timeouts.park_idle_after_ms), so reading sooner would measure a state a
            # real idle connection spends only its first second in.
            time.sleep(max(0.5, cfg.idle_settle - 0.3))
            run.rss_after_kb = rss_kb(rss_pid)
        elif kind in ("measure_start", "measure_end") and on_event is not None:
            on_event(kind)
        if kind == "measure_start":
            start = dict(
                t=time.monotonic(),
                server=proc_ticks(server.pids()),
                client=proc_ticks([p.pid]),
                busy=system_busy_ticks(),
                own=proc_ticks([os.getpid()]),
                cpus=per_cpu_busy_ticks(),
            )
        elif kind == "measure_end" and start:
            run.window_s = time.monotonic() - start["t"]
            run.server_ticks = proc_ticks(server.pids()) - start["server"]
            run.client_ticks = proc_ticks([p.pid]) - start["client"]
            run.busy_ticks = system_busy_ticks() - start["busy"]
            run.self_ticks = proc_ticks([os.getpid()]) - start["own"]
            cpus = per_cpu_busy_ticks()
            if run.window_s:
                run.cpu_util = {
                    c: (t - start["cpus"].get(c, t)) / CLK_TCK / run.window_s for c, t in cpus.items()
                }
        elif kind == "result":
            last = ev
    err = p.stderr.read() if p.stderr else ""
    p.wait()
    children.remove(p)
    if p.returncode != 0 or last is None:
        raise RuntimeError(f"generator failed ({p.returncode}): {err.strip()}")
    run.result = last
    return run


def summarize(server: Server, workload: str, rnd: int, run: GenRun) -> dict:
    r = run.result
    gb = r["body_bytes"] / 1e9
    server_cpu_s = run.server_ticks / CLK_TCK
    client_cpu_s = run.client_ticks / CLK_TCK
    window = run.window_s or r["elapsed_s"]
    mine = server_cpu_s + client_cpu_s + run.self_ticks / CLK_TCK
    other = max(0.0, run.busy_ticks / CLK_TCK - mine) / window if window else 0.0
    return {
        "server": server.name,
        "workload": workload,
        "round": rnd,
        "requests_per_s": r["requests_per_s"],
        "gb_per_s": r["gb_per_s"],
        "cpu_s_per_gb": server_cpu_s / gb if gb > 0 else None,
        "server_cpu_util": server_cpu_s / window if window else None,
        "client_cpu_util": client_cpu_s / window if window else None,
        # CPU used by anything else on the machine during the window, in cores: a
        # figure taken with this above ~0.05 was not taken on a quiet machine.
        "other_load": other,
        "p50_us": r["latency_us"]["p50"],
        "p99_us": r["latency_us"]["p99"],
        "errors": r["errors_total"],
        "requests": r["requests"],
        "ok": r["ok"],
    }


# ----------------------------------------------------------------------------- workloads


def files_args(cfg, prefix: str, count: int, conns: int) -> list[str]:
    return [
        "--workload", "files", "--prefix", prefix, "--count", str(count), "--suffix", ".bin",
        "--connections", str(conns), "--duration", str(cfg.duration), "--warmup", str(cfg.warmup),
    ]


def one_run(cfg, name: str, workload: str, rnd: int) -> dict:
    port = free_port()
    server = start_server(cfg, name, port)
    try:
        if workload == "small":
            run = run_generator(cfg, server, files_args(cfg, "/small/", SMALL_COUNT, CONNECTIONS["small"]))
            return summarize(server, workload, rnd, run)
        if workload == "large":
            run = run_generator(cfg, server, files_args(cfg, "/large/", LARGE_COUNT, CONNECTIONS["large"]))
            return summarize(server, workload, rnd, run)
        if workload == "ranges":
            args = [
                "--workload", "ranges", "--path", "/huge.bin", "--file-size", str(HUGE_SIZE),
                "--range-size", str(RANGE_SIZE), "--connections", str(CONNECTIONS["ranges"]),
                "--duration", str(cfg.duration), "--warmup", str(cfg.warmup),
            ]
            return summarize(server, workload, rnd, run_generator(cfg, server, args))
        if workload == "idle":
            return idle_run(cfg, server, rnd)
        if workload == "cold":
            return cold_run(cfg, server, rnd)
        raise ValueError(workload)
    finally:
        stop(server.proc)


def quiet_run(cfg, name: str, workload: str, rnd: int) -> dict:
    """One run on a quiet machine if possible: wait for quiet first, and redo a run
    that other processes disturbed (other load above --max-other-load)."""
    row: dict = {}
    for attempt in range(1 + cfg.retries):
        if cfg.wait_quiet > 0:
            wait_quiet(cfg.max_other_load, cfg.wait_quiet)
        row = one_run(cfg, name, workload, rnd)
        row["attempt"] = attempt
        other = row.get("other_load")
        if other is None or other <= cfg.max_other_load or attempt == cfg.retries:
            break
        log(f"{workload} r{rnd} {name}: other load {other:.2f} > {cfg.max_other_load}; running it again")
    return row


def idle_run(cfg, server: Server, rnd: int) -> dict:
    time.sleep(0.3)  # let the fresh server's start-up allocations settle before "before"
    args = files_args(cfg, "/small/", SMALL_COUNT, CONNECTIONS["idle"])
    args[1] = "idle"
    args += ["--idle-connections", str(cfg.idle_count), "--idle-settle", f"{cfg.idle_settle}s"]
    run = run_generator(cfg, server, args, rss_pid=server.rss_pid())
    out = summarize(server, "idle", rnd, run)
    idle = run.result["idle"]
    established = idle["established"] or 1
    out.update(
        idle_established=idle["established"],
        idle_failed=idle["failed"],
        idle_closed=idle["closed_by_server"],
        idle_open_at_end=idle["open_at_end"],
        rss_before_kb=run.rss_before_kb,
        rss_after_kb=run.rss_after_kb,
        kb_per_idle_conn=(run.rss_after_kb - run.rss_before_kb) / established,
        served=run.result["served"],
    )
    return out


def cold_run(cfg, server: Server, rnd: int) -> dict:
    """Hot 64 KiB requests (page cache) alongside cold 2 MiB ones (evicted, kept evicted)."""
    root = cfg.root
    warm(small_paths(root))
    cold = large_paths(root)
    evict(cold)
    stop_evicting = threading.Event()

    def evictor():
        while not stop_evicting.wait(EVICT_EVERY_S):
            evict(cold)

    results: dict[str, GenRun] = {}
    errors: list[BaseException] = []

    def gen(label, args):
        try:
            results[label] = run_generator(cfg, server, args)
        except BaseException as e:  # reported below, in the main thread
            errors.append(e)

    t_evict = threading.Thread(target=evictor, daemon=True)
    t_evict.start()
    hot = threading.Thread(target=gen, args=("hot", files_args(cfg, "/small/", SMALL_COUNT, CONNECTIONS["cold"])))
    cold_t = threading.Thread(target=gen, args=("cold", files_args(cfg, "/large/", LARGE_COUNT, COLD_CONNECTIONS)))
    hot.start()
    cold_t.start()
    hot.join()
    cold_t.join()
    stop_evicting.set()
    t_evict.join()
    if errors:
        raise errors[0]
    out = summarize(server, "cold", rnd, results["hot"])
    c = results["cold"].result
    out.update(
        cold_requests_per_s=c["requests_per_s"],
        cold_gb_per_s=c["gb_per_s"],
        cold_p50_us=c["latency_us"]["p50"],
        cold_p99_us=c["latency_us"]["p99"],
        errors=out["errors"] + c["errors_total"],
    )
    # The cold generator ran in the hot one's window: its CPU is ours, not "other".
    h = results["hot"]
    window = h.window_s or h.result["elapsed_s"]
    if window:
        out["other_load"] = max(0.0, out["other_load"] - results["cold"].client_ticks / CLK_TCK / window)
    # Both generators ran in the same window; CPU/GB over all bytes served.
    total_gb = (results["hot"].result["body_bytes"] + c["body_bytes"]) / 1e9
    ticks = results["hot"].server_ticks
    out["cpu_s_per_gb"] = (ticks / CLK_TCK) / total_gb if total_gb else None
    return out


def generator_check(cfg, rnd: int) -> list[dict]:
    """nginx serving 2 MiB files: wrk (copies bodies) vs linerate-bench (MSG_TRUNC)."""
    rows = []
    for client in ("wrk", "linerate-bench"):
        row: dict = {}
        for attempt in range(1 + cfg.retries):
            if cfg.wait_quiet > 0:
                wait_quiet(cfg.max_other_load, cfg.wait_quiet)
            server = start_nginx(cfg, free_port())
            try:
                if client == "linerate-bench":
                    args = files_args(cfg, "/large/", LARGE_COUNT, CONNECTIONS["generator"])
                    row = summarize(server, "generator", rnd, run_generator(cfg, server, args))
                else:
                    row = wrk_run(cfg, server)
            finally:
                stop(server.proc)
            row.update(client=client, round=rnd, attempt=attempt)
            if row["other_load"] <= cfg.max_other_load:
                break
            log(f"generator r{rnd} {client}: other load {row['other_load']:.2f} > {cfg.max_other_load}; again")
        rows.append(row)
    return rows


WRK_LUA = """\
-- Generated by bench/bench.py: uniform random choice of the 2 MiB files.
math.randomseed(1)
request = function()
  return wrk.format("GET", "/large/" .. math.random(0, %d) .. ".bin")
end
"""


def wrk_run(cfg, server: Server) -> dict:
    if not shutil.which("wrk"):
        raise RuntimeError("wrk not installed (apt-get install -y wrk)")
    lua = cfg.workdir / "wrk-large.lua"
    lua.write_text(WRK_LUA % (LARGE_COUNT - 1))
    cmd = [
        "taskset", "-c", str(cfg.client_cpu), "wrk", "-t1", f"-c{CONNECTIONS['generator']}",
        f"-d{max(1, round(cfg.duration))}s", "-s", str(lua), "--latency", f"http://{HOST}:{server.port}/",
    ]
    # wrk has no warm-up or events: sample around its whole run; its own CPU comes from
    # getrusage(RUSAGE_CHILDREN), which grows by exactly wrk's when it is reaped (the
    # servers, the only other children, are still running).
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, s0 = time.monotonic(), proc_ticks(server.pids())
    busy0, own0 = system_busy_ticks(), proc_ticks([os.getpid()])
    p = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate()
    window = time.monotonic() - t0
    s1 = proc_ticks(server.pids())
    busy1, own1 = system_busy_ticks(), proc_ticks([os.getpid()])
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    children.remove(p)
    client_cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    reqs = bytes_ = rps = None
    for line in out.splitlines():
        parts = line.split()
        if "requests in" in line:
            reqs = int(parts[0])
            bytes_ = parse_wrk_size(parts[4].rstrip(","))
        if line.startswith("Requests/sec:"):
            rps = float(parts[1])
    if reqs is None or rps is None or bytes_ is None:
        raise RuntimeError(f"cannot parse wrk output: {out}")
    secs = float(out.split("requests in ")[1].split("s,")[0])
    gb = bytes_ / 1e9
    return {
        "server": "nginx",
        "workload": "generator",
        "requests_per_s": rps,
        "gb_per_s": gb / secs,
        "cpu_s_per_gb": ((s1 - s0) / CLK_TCK) / gb if gb else None,
        "server_cpu_util": ((s1 - s0) / CLK_TCK) / window,
        "client_cpu_util": client_cpu / window,
        "other_load": max(0.0, (busy1 - busy0 - (s1 - s0) - (own1 - own0)) / CLK_TCK - client_cpu) / window,
        "p50_us": None,
        "p99_us": None,
        "errors": 0,
    }


def parse_wrk_size(s: str) -> float:
    units = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
    for u in ("TB", "GB", "MB", "KB", "B"):
        if s.endswith(u):
            return float(s[: -len(u)]) * units[u]
    return float(s)


# ------------------------------------------------------------------------------ report


def median(rows: list[dict], key: str):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def numeric_keys(rows: list[dict]) -> set[str]:
    """Keys whose values are numbers (medians of names or flags make no sense)."""
    return {
        k for r in rows for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def fmt(v, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def report(rows: list[dict], workloads: list[str], servers: list[str]) -> str:
    lines = []
    main_workloads = [w for w in workloads if w != "generator"]
    if main_workloads:
        lines.append(
            "| workload | server | req/s | GB/s | server CPU-s/GB | server CPU | generator CPU | p50 µs | p99 µs "
            "| notes | other load |"
        )
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for w in main_workloads:
        med = {}
        for s in servers:
            rs = [r for r in rows if r["workload"] == w and r["server"] == s]
            if not rs:
                continue
            m = {k: median(rs, k) for k in numeric_keys(rs)}
            med[s] = m
            extra = ""
            if w == "idle":
                extra = (
                    f"{fmt(m.get('kb_per_idle_conn'), '.1f')} KB/idle conn; "
                    f"{int(m.get('idle_established') or 0)} held, {int(m.get('idle_closed') or 0)} closed; "
                    f"served: {'yes' if all(r.get('served') for r in rs) else 'NO'}"
                )
            if w == "cold":
                extra = f"cold: {fmt(m.get('cold_requests_per_s'), '.0f')} req/s, p99 {fmt(m.get('cold_p99_us'), '.0f')} µs"
            lines.append(
                f"| {w} | {s} | {fmt(m['requests_per_s'], '.0f')} | {fmt(m['gb_per_s'], '.2f')} | "
                f"{fmt(m['cpu_s_per_gb'], '.3f')} | {fmt(m['server_cpu_util'], '.2f')} | "
                f"{fmt(m['client_cpu_util'], '.2f')} | {fmt(m['p50_us'], '.0f')} | {fmt(m['p99_us'], '.0f')} | "
                f"{extra} | {fmt(m['other_load'], '.2f')} |"
            )
        for other in [s for s in SERVERS if s != "linerate"]:
            if other not in med or "linerate" not in med:
                continue
            a, b = med["linerate"], med[other]

            def ratio(k):
                return a[k] / b[k] if a.get(k) and b.get(k) else None

            lines.append(
                f"| {w} | **linerate/{other}** | {fmt(ratio('requests_per_s'), '.2f')}× | "
                f"{fmt(ratio('gb_per_s'), '.2f')}× | {fmt(ratio('cpu_s_per_gb'), '.2f')}× | | | "
                f"{fmt(ratio('p50_us'), '.2f')}× | {fmt(ratio('p99_us'), '.2f')}× | | |"
            )
    gen = [r for r in rows if r["workload"] == "generator"]
    if gen:
        lines.append("")
        lines.append(
            "| generator check (nginx, 2 MiB files) | client | req/s | GB/s | nginx CPU | client CPU | other load |"
        )
        lines.append("|---|---|---:|---:|---:|---:|---:|")
        for client in ("wrk", "linerate-bench"):
            rs = [r for r in gen if r["client"] == client]
            if rs:
                lines.append(
                    f"| nginx | {client} | {fmt(median(rs, 'requests_per_s'), '.0f')} | "
                    f"{fmt(median(rs, 'gb_per_s'), '.2f')} | {fmt(median(rs, 'server_cpu_util'), '.2f')} | "
                    f"{fmt(median(rs, 'client_cpu_util'), '.2f')} | {fmt(median(rs, 'other_load'), '.2f')} |"
                )
    return "\n".join(lines).strip()


# -------------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 round, 2 s, 2,000 idle connections")
    ap.add_argument("--rounds", type=int, help="rounds per server and workload, median reported (3; quick 1)")
    ap.add_argument("--duration", type=float, help="measured seconds per run (10; quick 2)")
    ap.add_argument("--warmup", type=float, help="warm-up seconds per run (2; quick 0.5)")
    ap.add_argument("--workloads", default=",".join(ALL_WORKLOADS),
                    help=f"comma list of {ALL_WORKLOADS + OPTIONAL_WORKLOADS}")
    ap.add_argument("--servers", default="nginx,linerate",
                    help="comma list of nginx (open-file cache as large as linerate's), nginx-stock "
                         "(nginx's default: no open-file cache), nginx-aio (nginx plus `aio threads;`), linerate, linerate-base (--linerate-base)")
    ap.add_argument("--idle-count", type=int, help="idle connections in the idle workload (10000; quick 2000)")
    ap.add_argument("--idle-settle", type=float, help="seconds idle connections are held before load; RSS is read 0.3 s before its end (3; quick 2)")
    ap.add_argument("--max-other-load", type=float, default=0.10,
                    help="CPU cores others may use during a run before it counts as disturbed")
    ap.add_argument("--wait-quiet", type=float, default=0.0,
                    help="before each run, wait up to this many seconds for the machine to be quiet")
    ap.add_argument("--retries", type=int, default=0, help="times a disturbed run is run again")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/var/tmp")) / "linerate-bench",
                    help="content and logs; must be on a disk filesystem (not tmpfs) for the cold workload")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--linerate", default="target/release/linerate")
    ap.add_argument("--linerate-config", default=None, help="passed to linerate serve --config")
    ap.add_argument("--linerate-base", default=None,
                    help="another linerate binary, run as server linerate-base (before/after in one run)")
    ap.add_argument("--nginx-open-files", type=int, default=16384,
                    help="nginx open_file_cache max= (default 16384, linerate's appliance.open_file_cache default)")
    ap.add_argument("--generator", default=None,
                    help="load generator command (default: 'LINERATE bench' or the linerate-bench example)")
    ap.add_argument("--out", type=Path, default=None, help="results JSON (default WORKDIR/results.json)")
    cfg = ap.parse_args()

    # Explicit options win over --quick's defaults.
    for name, full, quick in [
        ("rounds", 3, 1), ("duration", 10.0, 2.0), ("warmup", 2.0, 0.5),
        ("idle_count", 10_000, 2000), ("idle_settle", 3.0, 2.0),
    ]:
        if getattr(cfg, name) is None:
            setattr(cfg, name, quick if cfg.quick else full)
    workloads = [w for w in cfg.workloads.split(",") if w]
    servers = [s for s in cfg.servers.split(",") if s]
    for w in workloads:
        if w not in ALL_WORKLOADS + OPTIONAL_WORKLOADS:
            ap.error(f"unknown workload {w}")
    for s in servers:
        if s not in SERVERS:
            ap.error(f"unknown server {s}")
        if s == "linerate-base" and not cfg.linerate_base:
            ap.error("server linerate-base needs --linerate-base BIN")
    cfg.generator = cfg.generator.split() if cfg.generator else default_generator(cfg.linerate)
    cfg.workdir = cfg.workdir.resolve()
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    cfg.root = cfg.workdir / "root"
    out_path = cfg.out or cfg.workdir / "results.json"

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    atexit.register(stop_all)
    # The orchestrator (and the cold workload's evictor) runs on the client CPU, never
    # on the server's.
    os.sched_setaffinity(0, {cfg.client_cpu})

    make_content(cfg.root)
    warm(small_paths(cfg.root) + large_paths(cfg.root) + [cfg.root / "huge.bin"])
    log(f"generator: {' '.join(cfg.generator)}; servers {servers}; workloads {workloads}; "
        f"{cfg.rounds} rounds x {cfg.duration} s (+{cfg.warmup} s warm-up)")

    rows: list[dict] = []
    started = time.time()
    try:
        for w in workloads:
            for rnd in range(cfg.rounds):
                if w == "generator":
                    got = generator_check(cfg, rnd)
                    rows += got
                    for g in got:
                        log(f"generator r{rnd} {g['client']:>15}: {g['gb_per_s']:.2f} GB/s")
                    continue
                order = servers if rnd % 2 == 0 else list(reversed(servers))
                for s in order:
                    row = quiet_run(cfg, s, w, rnd)
                    rows.append(row)
                    log(f"{w} r{rnd} {s:>8}: {row['requests_per_s']:.0f} req/s, {row['gb_per_s']:.2f} GB/s, "
                        f"{fmt(row['cpu_s_per_gb'], '.3f')} CPU-s/GB, p99 {fmt(row['p99_us'], '.0f')} µs, "
                        f"errors {row['errors']}, other load {fmt(row['other_load'], '.2f')}")
    finally:
        meta = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
            "kernel": os.uname().release,
            "cpus": os.cpu_count(),
            "cpu_model": cpu_model(),
            "nginx": nginx_version(cfg.nginx),
            "generator": cfg.generator,
            "rounds": cfg.rounds,
            "duration_s": cfg.duration,
            "warmup_s": cfg.warmup,
            "idle_count": cfg.idle_count,
        }
        out_path.write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))
        log(f"results: {out_path}")
    print(report(rows, workloads, servers))
    return 0


def default_generator(linerate: str) -> list[str]:
    if os.access(linerate, os.X_OK):
        ok = subprocess.run([linerate, "bench", "--help"], capture_output=True).returncode == 0
        if ok:
            return [linerate, "bench"]
    example = Path(linerate).parent / "examples" / "bench"
    if os.access(example, os.X_OK):
        return [str(example)]
    raise SystemExit(f"no load generator: neither '{linerate} bench' nor {example} works")


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def nginx_version(nginx: str) -> str:
    try:
        return subprocess.run([nginx, "-v"], capture_output=True, text=True).stderr.strip()
    except OSError:
        return "absent"


if __name__ == "__main__":
    sys.exit(main())
