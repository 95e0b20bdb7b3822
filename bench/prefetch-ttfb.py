#!/usr/bin/env python3
"""Startup and segment time-to-first-byte for a cold HLS stream through cache mode, with
and without segment prefetch (issue 23, part 7), and the origin bytes prefetch spent on
segments no client was served.

Everything runs on 127.0.0.1 and is started and stopped here: an origin (this script,
standard library only) that serves an HLS stream with a fixed delay before each answer
(an origin shield or a packager some milliseconds away), linerate in cache mode in front
of it (a fresh cache directory per round: each round plays a cold stream), and the
clients:

- `ffmpeg`: `ffmpeg -re -i .../master.m3u8 -c copy -f null -` (libavformat: real-time
  playback, every request `Range: bytes=0-`), through a small timing relay in front of
  linerate that notes when each request went out and when its first response byte came
  back (requests on one connection are sequential: libavformat does not pipeline);
- `sequential`: plain GETs as a steady player makes them: the master, the media
  playlist, then segment i at i × the segment duration after segment 0 (TTFB from the
  request to the status line);
- `leave-N`: the same, leaving after N segments (a viewer who stops): what prefetch
  fetched after that is origin bytes no client was served;
- `hlsjs`: hls.js (the copy linerate embeds) in headless Chromium, the admin
  listener's `/player` page playing the stream through the same timing relay to its
  end (watched over Chromium's DevTools protocol: `window.linerate`, as the dashboard
  tests do). hls.js loads fragments one after another as fast as its buffer allows
  (30 s ahead by default), not paced by playback; a fresh browser profile per round.

Per round and client: startup (from the first request, the master playlist, to the
first byte of the first segment), the first segment's TTFB and the later segments'
TTFB; the origin's requests and bytes, the bytes of objects fetched from the origin that
no client asked for (prefetch's unread), and the cache's prefetch counters from
`/metrics`.

    nice -n 10 python3 bench/prefetch-ttfb.py --linerate target/release/linerate

Options: `--delay-ms` (origin delay per request, default 75), `--prefetch` (the
`prefetch_segments` of the "with" runs, default 2), `--rounds` (default 3),
`--stream DIR` (an HLS directory with `master.m3u8`; default `sample/hls`),
`--generate SECONDS` (make a longer stream with ffmpeg instead: 2 s segments of a test
pattern), `--clients` (default `sequential,leave-2,ffmpeg,hlsjs`), `--chromium PATH`
(default: `chromium`, `chromium-browser` or `google-chrome` on the PATH), `--json FILE`.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import http.server
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        try:
            socket.create_connection((HOST, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port} after {limit} s")


# ------------------------------------------------------------------------------ origin


class Origin:
    """Serves `root` over HTTP/1.1 (keep-alive), waiting `delay` before each answer;
    records (path, bytes sent) of every GET."""

    def __init__(self, root: Path, delay: float):
        self.root = root.resolve()
        self.delay = delay
        self.lock = threading.Lock()
        self.log: list[tuple[str, int]] = []
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                time.sleep(origin.delay)
                path = self.path.split("?", 1)[0]
                file = (origin.root / path.lstrip("/")).resolve()
                if origin.root not in file.parents or not file.is_file():
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = file.read_bytes()
                playlist = file.suffix == ".m3u8"
                ctype = "application/vnd.apple.mpegurl" if playlist else "video/mp2t"
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "max-age=60" if playlist else "max-age=3600")
                # hls.js reads the stream from a page on linerate's admin listener:
                # another origin to the browser.
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()
                self.wfile.write(body)
                with origin.lock:
                    origin.log.append((path, len(body)))

        self.server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def take_log(self) -> list[tuple[str, int]]:
        with self.lock:
            out, self.log = self.log, []
        return out

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ------------------------------------------------------------------------------ relay


class Relay:
    """A TCP relay to `port` noting, per request, when it was sent and when the first
    byte of its answer came back (HTTP/1.1 without pipelining: one request at a time
    per connection)."""

    def __init__(self, port: int):
        self.target = port
        self.lock = threading.Lock()
        self.events: list[tuple[str, float, float]] = []  # (target, sent, first byte)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((HOST, 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.stopping = False
        self.sockets: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        t = threading.Thread(target=self.accept, daemon=True)
        t.start()
        self.threads.append(t)

    def accept(self) -> None:
        while not self.stopping:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection((HOST, self.target))
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.sockets += [client, server]
            pending: list = [None]  # (target, sent) of the request waiting for its answer
            for args in ((client, server, pending, True), (server, client, pending, False)):
                t = threading.Thread(target=self.pump, args=args, daemon=True)
                t.start()
                self.threads.append(t)

    def pump(self, src: socket.socket, dst: socket.socket, pending: list, upstream: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            now = time.monotonic()
            with self.lock:
                if upstream:
                    m = re.match(rb"(GET|HEAD) (\S+) HTTP/1\.[01]\r\n", data)
                    if m:
                        pending[0] = (m.group(2).decode(errors="replace"), now)
                elif pending[0] is not None:
                    target, sent = pending[0]
                    self.events.append((target, sent, now))
                    pending[0] = None
            try:
                dst.sendall(data)
            except OSError:
                return

    def take(self) -> list[tuple[str, float, float]]:
        with self.lock:
            out, self.events = self.events, []
        return out

    def stop(self) -> None:
        self.stopping = True
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                try:
                    s.close()
                except OSError:
                    pass


# ------------------------------------------------------------------------------ linerate


class Linerate:
    def __init__(self, binary: str, work: Path, origin_port: int, prefetch: int):
        shutil.rmtree(work, ignore_errors=True)
        (work / "cache").mkdir(parents=True)
        self.port = free_port()
        self.admin = free_port()
        config = work / "linerate.toml"
        config.write_text(
            f'[server]\nlisten = ["{HOST}:{self.port}"]\nworkers = 1\n\n'
            f'[admin]\nlisten = "{HOST}:{self.admin}"\n\n'
            f'[[cache.disk]]\nname = "d0"\npath = "{work / "cache"}"\nmax_bytes = {1 << 30}\n\n'
            f'[[origin]]\nname = "origin"\nservers = ["http://{HOST}:{origin_port}"]\n\n'
            f'[[route]]\npath_prefix = "/"\norigin = "origin"\nslice_bytes = 0\n'
            f"prefetch_segments = {prefetch}\n"
        )
        self.log = open(work / "stderr.log", "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", "--config", str(config)], stdout=self.log, stderr=self.log
        )
        try:
            wait_listening(self.port, self.proc)
            wait_listening(self.admin, self.proc)
        except RuntimeError as e:
            self.stop()
            tail = (work / "stderr.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"linerate did not start: {e}\n{tail}") from None

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://{HOST}:{self.admin}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("linerate_cache_prefetch_"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ------------------------------------------------------------------------------ clients


def media_uris(body: bytes) -> list[str]:
    return [l for l in body.decode().splitlines() if l and not l.startswith("#")]


def play_sequential(port: int, master: str, duration: float, leave: int | None) -> dict:
    """Plain GETs on one connection: master, media playlist, then segment i at
    i × `duration` after segment 0. TTFB: request sent to status line read."""
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    served: list[str] = []

    def get(path: str) -> tuple[float, float, bytes]:
        sent = time.monotonic()
        conn.request("GET", path)
        r = conn.getresponse()
        first = time.monotonic()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"{path}: {r.status}")
        served.append(path)
        return sent, first, body

    base = master.rsplit("/", 1)[0] + "/"
    t0, _, body = get(master)
    media = base + media_uris(body)[0]
    _, _, body = get(media)
    mbase = media.rsplit("/", 1)[0] + "/"
    segments = [mbase + u for u in media_uris(body)]
    if leave is not None:
        segments = segments[:leave]
    ttfb = []
    startup = None
    start = None
    for i, seg in enumerate(segments):
        if start is not None:
            wait = start + i * duration - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        sent, first, _ = get(seg)
        if start is None:
            start = sent
            startup = first - t0
        ttfb.append(first - sent)
    conn.close()
    return {"startup": startup, "ttfb": ttfb, "served": served}


def play_ffmpeg(ffmpeg: str, relay: Relay, master: str) -> dict:
    cmd = [
        ffmpeg, "-hide_banner", "-loglevel", "error", "-re",
        "-i", f"http://{HOST}:{relay.port}{master}", "-map", "0", "-c", "copy", "-f", "null", "-",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"ffmpeg failed: {p.stderr[-2000:]}")
    time.sleep(0.2)
    return relay_run(relay)


def relay_run(relay: Relay) -> dict:
    """Startup and per-segment TTFB from what the relay saw of one playback."""
    events = relay.take()
    if not events:
        raise RuntimeError("the player made no request through the relay")
    t0 = events[0][1]
    segs = [(t, s, f) for (t, s, f) in events if t.split("?", 1)[0].endswith(".ts")]
    if not segs:
        raise RuntimeError(f"no segment requests: {events}")
    # One TTFB per segment: its first request (libavformat may ask again after a probe).
    seen: dict[str, float] = {}
    for t, s, f in segs:
        seen.setdefault(t, f - s)
    return {
        "startup": segs[0][2] - t0,
        "ttfb": list(seen.values()),
        "served": [t for (t, _, _) in events],
    }


class DevTools:
    """Chromium's DevTools protocol over a WebSocket (RFC 6455, text frames only),
    attached to the page whose URL contains `url_part`: enough to evaluate an
    expression in it."""

    def __init__(self, port: int, url_part: str, limit: float = 20.0):
        deadline = time.monotonic() + limit
        path = None
        while path is None:
            try:
                with urllib.request.urlopen(f"http://{HOST}:{port}/json/list", timeout=5) as r:
                    targets = json.loads(r.read())
                path = next(
                    (t["webSocketDebuggerUrl"].split(f":{port}", 1)[1] for t in targets
                     if t.get("type") == "page" and url_part in t.get("url", "")),
                    None,
                )
            except (OSError, ValueError):
                pass
            if path is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no DevTools page target with {url_part!r}")
                time.sleep(0.2)
        self.sock = socket.create_connection((HOST, port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            b = self.sock.recv(1)
            if not b:
                raise RuntimeError("DevTools closed the WebSocket upgrade")
            head += b
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"DevTools WebSocket upgrade: {head!r}")
        self.next_id = 1

    def exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            b = self.sock.recv(n - len(out))
            if not b:
                raise RuntimeError("DevTools closed the WebSocket")
            out += b
        return out

    def send(self, text: str) -> None:
        p = text.encode()
        n = len(p)
        # A client frame is masked; a zero key leaves the payload as it is.
        if n < 126:
            head = bytes([0x81, 0x80 | n])
        elif n < 65536:
            head = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
        else:
            head = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
        self.sock.sendall(head + b"\0\0\0\0" + p)

    def receive(self) -> str:
        message = b""
        while True:
            b0, b1 = self.exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self.exact(2), "big")
            elif n == 127:
                n = int.from_bytes(self.exact(8), "big")
            payload = self.exact(n)
            opcode = b0 & 0x0F
            if opcode in (0x1, 0x0):
                message += payload
                if b0 & 0x80:
                    return message.decode(errors="replace")
            elif opcode == 0x8:
                raise RuntimeError("DevTools closed the WebSocket")

    def eval(self, expression: str):
        n = self.next_id
        self.next_id += 1
        self.send(json.dumps({
            "id": n, "method": "Runtime.evaluate",
            "params": {"expression": expression, "returnByValue": True},
        }))
        while True:
            m = json.loads(self.receive())
            if m.get("id") == n:
                return m.get("result", {}).get("result", {}).get("value")

    def close(self) -> None:
        self.sock.close()


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def play_hlsjs(chromium: str, admin: int, relay: Relay, master: str, length: float, work: Path) -> dict:
    """hls.js in headless Chromium (linerate's `/player` page on the admin listener)
    plays the stream through the relay until the media ends (or its clock passes
    `length` less half a second); a fresh profile, so nothing is in the browser's
    cache."""
    profile = work / "chromium-profile"
    shutil.rmtree(profile, ignore_errors=True)
    url = f"http://{HOST}:{admin}/player?src=http://{HOST}:{relay.port}{master}"
    proc = subprocess.Popen(
        [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--window-size=1200,800", "--autoplay-policy=no-user-gesture-required",
            "--no-first-run", "--remote-debugging-port=0", f"--user-data-dir={profile}", url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    port: list[int] = []
    found = threading.Event()

    def drain() -> None:
        # The DevTools port from its "DevTools listening on ws://HOST:PORT/..." line;
        # the rest read so Chromium never blocks on a full pipe.
        for line in proc.stderr:
            m = re.search(rb"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m and not port:
                port.append(int(m.group(1)))
                found.set()

    threading.Thread(target=drain, daemon=True).start()
    dt = None
    try:
        if not found.wait(30):
            raise RuntimeError("no DevTools line from chromium")
        dt = DevTools(port[0], "/player")
        deadline = time.monotonic() + length + 30
        while True:
            state = dt.eval("JSON.stringify(window.linerate || {})")
            state = json.loads(state or "{}")
            if state.get("fatal"):
                raise RuntimeError(f"hls.js: {state}")
            if state.get("ended") or float(state.get("currentTime") or 0) > length - 0.5:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"hls.js did not play to the end: {state}")
            time.sleep(0.1)
    finally:
        if dt:
            dt.close()
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
    time.sleep(0.2)
    return relay_run(relay)


# ------------------------------------------------------------------------------ report


def ms(v: float) -> str:
    return f"{v * 1000:.1f}"


def summarise(runs: list[dict]) -> dict:
    startup = [r["startup"] for r in runs]
    first = [r["ttfb"][0] for r in runs]
    later = [t for r in runs for t in r["ttfb"][1:]]
    later.sort()

    def pct(xs, q):
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")

    return {
        "startup_median": statistics.median(startup),
        "first_segment_median": statistics.median(first),
        "later_median": statistics.median(later) if later else float("nan"),
        "later_p90": pct(later, 0.9),
        "later_max": later[-1] if later else float("nan"),
        "later_n": len(later),
        "origin_requests": statistics.median(r["origin_requests"] for r in runs),
        "origin_bytes": statistics.median(r["origin_bytes"] for r in runs),
        "unserved_bytes": statistics.median(r["unserved_bytes"] for r in runs),
        "issued": statistics.median(r["metrics"].get("linerate_cache_prefetch_issued_total", 0) for r in runs),
        "used": statistics.median(r["metrics"].get("linerate_cache_prefetch_used_total", 0) for r in runs),
    }


def generate(ffmpeg: str, seconds: int, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            ffmpeg, "-hide_banner", "-loglevel", "error", "-y",
            "-f", "lavfi", "-i", f"testsrc2=size=426x240:rate=25:duration={seconds}",
            "-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds}",
            "-c:v", "libx264", "-preset", "veryfast", "-g", "50", "-keyint_min", "50",
            "-sc_threshold", "0", "-b:v", "300k", "-c:a", "aac", "-b:a", "64k",
            "-f", "hls", "-hls_time", "2", "-hls_playlist_type", "vod",
            "-hls_segment_filename", str(out / "segment_%03d.ts"), str(out / "index.m3u8"),
        ],
        check=True,
    )
    (out / "master.m3u8").write_text(
        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-STREAM-INF:BANDWIDTH=400000,RESOLUTION=426x240\nindex.m3u8\n"
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--linerate", default=str(REPO / "target/release/linerate"))
    ap.add_argument("--ffmpeg", default=shutil.which("ffmpeg") or "ffmpeg")
    ap.add_argument("--delay-ms", type=float, default=75.0)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stream", default=str(REPO / "sample/hls"))
    ap.add_argument("--generate", type=int, default=0, metavar="SECONDS")
    ap.add_argument("--clients", default="sequential,leave-2,ffmpeg,hlsjs")
    ap.add_argument("--chromium", default=find_chromium() or "chromium")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    clients = [c for c in args.clients.split(",") if c]
    for c in clients:
        if c not in ("sequential", "ffmpeg", "hlsjs") and not re.fullmatch(r"leave-\d+", c):
            ap.error(f"unknown client {c!r}")
    if not os.access(args.linerate, os.X_OK):
        ap.error(f"{args.linerate} is not an executable (cargo build --release -p linerate)")
    if "ffmpeg" in clients or args.generate:
        if not shutil.which(args.ffmpeg):
            ap.error("ffmpeg is not installed (leave it out of --clients)")
    if "hlsjs" in clients and not shutil.which(args.chromium):
        ap.error("chromium is not installed (apt-get install chromium, or leave hlsjs out of --clients)")

    work = Path(tempfile.mkdtemp(prefix="prefetch-ttfb-"))
    origin = None
    try:
        if args.generate:
            stream = generate(args.ffmpeg, args.generate, work / "stream" / "hls")
        else:
            stream = Path(args.stream)
        if not (stream / "master.m3u8").is_file():
            ap.error(f"{stream} has no master.m3u8")
        media = media_uris((stream / "master.m3u8").read_bytes())[0]
        durations = [float(m) for m in re.findall(rb"#EXTINF:([0-9.]+)", (stream / media).read_bytes())]
        duration = statistics.median(durations)
        # The origin serves the stream's parent, so the path is /<dir>/master.m3u8.
        origin = Origin(stream.parent, args.delay_ms / 1000)
        master = f"/{stream.name}/master.m3u8"
        results: dict = {}
        print(
            f"stream {stream} ({len(durations)} segments of {duration:g} s), origin delay "
            f"{args.delay_ms:g} ms, prefetch_segments {args.prefetch} vs 0, {args.rounds} rounds",
            flush=True,
        )
        for client in clients:
            for k in (0, args.prefetch):
                runs = []
                for rnd in range(args.rounds):
                    lr = Linerate(args.linerate, work / "linerate", origin.port, k)
                    relay = Relay(lr.port) if client in ("ffmpeg", "hlsjs") else None
                    try:
                        origin.take_log()
                        if client == "ffmpeg":
                            run = play_ffmpeg(args.ffmpeg, relay, master)
                        elif client == "hlsjs":
                            run = play_hlsjs(
                                args.chromium, lr.admin, relay, master, sum(durations), work
                            )
                        else:
                            leave = int(client.split("-")[1]) if client.startswith("leave-") else None
                            run = play_sequential(lr.port, master, duration, leave)
                        # Let prefetches started by the last segment finish.
                        time.sleep(max(1.0, 4 * args.delay_ms / 1000))
                        log = origin.take_log()
                        served = set(run["served"])
                        run["origin_requests"] = len(log)
                        run["origin_bytes"] = sum(b for _, b in log)
                        run["unserved_bytes"] = sum(b for p, b in log if p not in served)
                        run["metrics"] = lr.metrics()
                    finally:
                        if relay:
                            relay.stop()
                        lr.stop()
                    runs.append(run)
                    print(
                        f"  {client:<10} k={k} round {rnd}: startup {ms(run['startup'])} ms, "
                        f"TTFB {' '.join(ms(t) for t in run['ttfb'])} ms, origin "
                        f"{run['origin_requests']} req {run['origin_bytes']} B "
                        f"(unserved {run['unserved_bytes']} B)",
                        flush=True,
                    )
                results[f"{client} k={k}"] = {"runs": runs, "summary": summarise(runs)}
        print()
        print("| client | prefetch | startup ms | segment 0 TTFB ms | later segments TTFB ms: median / p90 / max (n) | origin requests | origin bytes | bytes fetched, never served | prefetch issued / used |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, r in results.items():
            s = r["summary"]
            client, k = name.split(" k=")
            print(
                f"| {client} | {k} | {ms(s['startup_median'])} | {ms(s['first_segment_median'])} | "
                f"{ms(s['later_median'])} / {ms(s['later_p90'])} / {ms(s['later_max'])} ({s['later_n']}) | "
                f"{s['origin_requests']:g} | {s['origin_bytes']:,.0f} | {s['unserved_bytes']:,.0f} | "
                f"{s['issued']:g} / {s['used']:g} |"
            )
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    finally:
        if origin:
            origin.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
