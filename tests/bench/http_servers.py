#!/usr/bin/env python3
"""sixdim's own HTTP server against two kept WSGI servers (waitress, cheroot), under abuse.

Usage (from the repository root):

    python -m tests.bench.http_servers [--out FILE] [--servers sixdim,waitress,...] [--no-tls]
                                       [--connections 200] [--probes 20]

Each server serves the same tiny WSGI app (``GET /healthz`` -> 200 ``ok``; ``GET /metrics`` ->
200 with a precomputed ~200 KB body) on 127.0.0.1, in a child process of its own (one fresh child
per case, so every case starts from the same state and the child's memory and threads are its
own), with comparable settings: 8 worker threads, a 5 s read/channel timeout where the server has
one.  The servers:

* ``sixdim``: :class:`sixdim.http.server.HttpServer` itself, with its defaults (8 workers, 64
  queued, a waiting room of 512 for connections that have sent nothing, 5 s read timeout).
* ``waitress``: ``threads=8, channel_timeout=5``, everything else waitress's default (notably
  ``connection_limit=100`` and ``cleanup_interval=30``).
* ``waitress-tuned``: as ``waitress`` plus ``connection_limit=584`` (sixdim's 512 waiting + 64
  queued + 8 workers) and ``cleanup_interval=1`` (so the 5 s channel timeout is applied within
  ~1 s, not within 30).
* ``cheroot``: ``numthreads=8, max=8, timeout=5``.

The cases, each bounded in time:

1. ``idle``: 50 sequential ``/healthz`` probes and 20 sequential ``/metrics`` fetches.
2. ``flood``: ``--connections`` TCP connections that connect and send nothing, held open (one the
   server closes is opened again 1 s later, as a real flood would); once they are up, ``--probes``
   ``/healthz`` probes, one started every 0.25 s, each with a 1 s client deadline (connect, TLS,
   request and whole answer).
3. ``drip``: ``--connections`` connections that each send the request line and then one header
   line every 2.5 s, never finishing the request (with TLS: one byte of a real ClientHello every
   2.5 s); the same probes.

With openssl on the PATH (and without ``--no-tls``), the three cases run again over TLS for sixdim
(its web configuration with a self-signed certificate) and cheroot (its builtin ssl adapter, a
one-line setting); waitress has no TLS.  The TLS idle case also sends plain HTTP to the TLS port
and records the first line of the answer.

For each case it records the probes answered (200 within the deadline) with p50/max latency, how
the others failed, and the child's resident memory, threads and file descriptors before the load
and at their peak during it (psutil, sampled every 0.2 s), its CPU seconds during the load, what
the attacking side saw (connections open, closed by the server, reopened), and how long
``/healthz`` took to answer again once the load stopped.

Load generator and servers share the machine (2 cores on the development machine), so latencies
are upper bounds; the verdicts (answered or not, threads and memory bounded or not) do not depend
on the machine's speed.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import platform
import selectors
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
WORKERS = 8
READ_TIMEOUT = 5
METRICS_BYTES = 200_000
SERVERS = ("sixdim", "waitress", "waitress-tuned", "cheroot")
TLS_SERVERS = ("sixdim", "cheroot")
SETTINGS = {
    "sixdim": "HttpServer defaults: WORKERS=8, QUEUED=64, WAITING=512, read_timeout=5",
    "waitress": "threads=8, channel_timeout=5 (connection_limit=100, cleanup_interval=30, backlog=1024: defaults)",
    "waitress-tuned": "threads=8, channel_timeout=5, connection_limit=584, cleanup_interval=1",
    "cheroot": "numthreads=8, max=8, timeout=5 (request_queue_size=5, accepted_queue_size=-1: defaults)",
}
PROBE_SPACING = 0.25
PROBE_DEADLINE = 1.0
DRIP_SECONDS = 2.5
REOPEN_DELAY = 1.0
CONNECT_GIVE_UP = 3.0


# --------------------------------------------------------------------------- the child: one server

def metrics_body() -> bytes:
    """~200 KB of Prometheus text, made once."""
    lines = [b"# HELP sixdim_bench_value A synthetic figure.\n", b"# TYPE sixdim_bench_value gauge\n"]
    size, i = sum(map(len, lines)), 0
    while size < METRICS_BYTES:
        line = (f'sixdim_bench_value{{gpu="{i % 8}",workload="gemm",shape="m={256 + i},n=256,k=256",'
                f'precision="bf16",dimension="throughput"}} {i * 1.25e12:.6e}\n').encode()
        lines.append(line)
        size += len(line)
        i += 1
    return b"".join(lines)


def make_wsgi_app():
    body = metrics_body()
    metrics_headers = [("Content-Type", "text/plain; version=0.0.4; charset=utf-8"),
                       ("Content-Length", str(len(body)))]

    def app(environ: dict, start_response) -> list[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "3")])
            return [b"ok\n"]
        if path == "/metrics":
            start_response("200 OK", metrics_headers)
            return [body]
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "10")])
        return [b"not found\n"]

    return app


def serve_child(kind: str, tls_dir: str | None) -> None:
    """Run one server until stdin closes (the parent stopped it, or died); print its port first."""
    app = make_wsgi_app()
    cert = key = None
    if tls_dir:
        cert, key = os.path.join(tls_dir, "server.crt"), os.path.join(tls_dir, "server.key")
    if kind == "sixdim":
        from sixdim.http.server import HttpServer
        web = None
        if tls_dir:
            from sixdim.http import webconfig
            path = os.path.join(tls_dir, "web.yml")
            with open(path, "w") as f:
                f.write(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
            web = webconfig.load(path)
        server = HttpServer(HOST, 0, app, web=web)  # its defaults: 8 workers, 5 s read timeout
        port, stop = server.port, server.shutdown
    elif kind in ("waitress", "waitress-tuned"):
        from waitress import create_server
        options: dict[str, Any] = {"threads": WORKERS, "channel_timeout": READ_TIMEOUT}
        if kind == "waitress-tuned":
            options.update(connection_limit=584, cleanup_interval=1)
        server = create_server(app, host=HOST, port=0, **options)
        threading.Thread(target=server.run, daemon=True, name="waitress").start()
        port, stop = server.effective_port, server.close
    elif kind == "cheroot":
        from cheroot.wsgi import Server
        server = Server((HOST, 0), app, numthreads=WORKERS, max=WORKERS, timeout=READ_TIMEOUT)
        if tls_dir:
            from cheroot.ssl.builtin import BuiltinSSLAdapter
            server.ssl_adapter = BuiltinSSLAdapter(cert, key)
        server.prepare()  # binds
        port = server.bind_addr[1]
        threading.Thread(target=server.serve, daemon=True, name="cheroot").start()
        stop = server.stop
    else:
        raise SystemExit(f"unknown server {kind!r}")
    print(f"PORT {port}", flush=True)
    sys.stdin.read()  # until the parent closes our stdin (or dies)
    threading.Timer(3.0, os._exit, (0,)).start()  # a stop that hangs must not keep the child
    try:
        stop()
    finally:
        os._exit(0)


class Child:
    """A server in a child process of its own; :meth:`stop` ends it, whatever state it is in."""

    def __init__(self, kind: str, tls_dir: str | None, log_dir: str):
        self.kind = kind
        self.log_path = os.path.join(log_dir, f"{kind}-{'tls' if tls_dir else 'plain'}-{time.monotonic_ns()}.log")
        self._log = open(self.log_path, "wb")
        command = [sys.executable, "-m", "tests.bench.http_servers", "--serve", kind]
        if tls_dir:
            command += ["--tls-dir", tls_dir]
        self.proc = subprocess.Popen(command, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, start_new_session=True)
        self.port = self._read_port(15.0)
        self.ps = psutil.Process(self.proc.pid)

    def _read_port(self, timeout: float) -> int:
        found: list[int] = []

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.startswith(b"PORT "):
                    found.append(int(line.split()[1]))
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if not found:
            self.stop()
            raise RuntimeError(f"{self.kind} did not start within {timeout:.0f} s; its log:\n{self.log_tail()}")
        return found[0]

    def log_tail(self, n: int = 2000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()  # asks it to stop
            except OSError:
                pass
            try:
                self.proc.wait(4.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5.0)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self._log.close()


# --------------------------------------------------------------------------- the client side

def tls_client_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a self-signed test certificate
    return context


def client_hello() -> bytes:
    """The bytes of a real TLS ClientHello, for the slow-handshake drip."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    connection = tls_client_context().wrap_bio(incoming, outgoing, server_side=False)
    try:
        connection.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def probe(port: int, path: str = "/healthz", deadline_s: float = PROBE_DEADLINE,
          tls: ssl.SSLContext | None = None, expect: bytes | None = b"ok\n") -> dict[str, Any]:
    """One GET with a deadline on the whole exchange: connect, TLS, request, the entire answer.
    ``ok`` when it is a 200 (with ``expect`` as its body) in time; otherwise ``error`` says how."""
    start = time.perf_counter()
    deadline = start + deadline_s
    sock: socket.socket | None = None
    data = bytearray()
    try:
        sock = socket.create_connection((HOST, port), timeout=deadline_s)
        if tls is not None:
            sock.settimeout(max(0.001, deadline - time.perf_counter()))
            sock = tls.wrap_socket(sock)
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n".encode())
        length = None
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            head_end = data.find(b"\r\n\r\n")
            if head_end >= 0 and length is None:
                for line in bytes(data[:head_end]).split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
            if length is not None and len(data) >= head_end + 4 + length:
                break
        latency = time.perf_counter() - start
        if not data:
            return {"ok": False, "error": "closed, no answer", "seconds": latency}
        status = bytes(data.split(b"\r\n", 1)[0])
        head, _, body = bytes(data).partition(b"\r\n\r\n")
        if b" 200 " not in status + b" ":
            return {"ok": False, "error": f"answer {status.decode(errors='replace')[:40]}", "seconds": latency}
        if expect is not None and body != expect:
            return {"ok": False, "error": "wrong body", "seconds": latency}
        return {"ok": True, "seconds": latency, "bytes": len(body)}
    except TimeoutError:  # socket.timeout is TimeoutError
        return {"ok": False, "error": "timeout", "seconds": time.perf_counter() - start}
    except ConnectionRefusedError:
        return {"ok": False, "error": "connection refused", "seconds": time.perf_counter() - start}
    except (ConnectionResetError, BrokenPipeError):
        return {"ok": False, "error": "reset", "seconds": time.perf_counter() - start}
    except ssl.SSLError as exc:
        return {"ok": False, "error": f"tls: {exc.reason or exc}", "seconds": time.perf_counter() - start}
    except OSError as exc:
        return {"ok": False, "error": f"os: {exc.strerror or exc}", "seconds": time.perf_counter() - start}
    finally:
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


def plain_http_to_tls_port(port: int) -> str:
    """The first line a TLS port answers to plain HTTP ('' when it just closes)."""
    try:
        with socket.create_connection((HOST, port), timeout=3) as sock:
            sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data.split(b"\r\n", 1)[0].decode(errors="replace")
    except OSError as exc:
        return f"(no answer: {type(exc).__name__})"


class _Slot:
    __slots__ = ("sock", "state", "since", "next_send", "sent", "reopen_at")

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.state = "closed"  # closed -> connecting -> open -> closed
        self.since = 0.0
        self.next_send = 0.0
        self.sent = 0
        self.reopen_at = 0.0


class Attack(threading.Thread):
    """``count`` abusive connections kept up by one thread and a selector: ``flood`` (connect, send
    nothing) or ``drip`` (a piece every 2.5 s, never a whole request); a connection the server
    closes is opened again :data:`REOPEN_DELAY` later.  Non-blocking connects, so a server whose
    backlog is full cannot stall the attack."""

    def __init__(self, port: int, mode: str, count: int, tls: bool):
        super().__init__(daemon=True, name=f"attack-{mode}")
        self.port, self.mode, self.count = port, mode, count
        self.pieces = ([bytes([b]) for b in client_hello()] if tls else
                       [b"GET /healthz HTTP/1.1\r\n", f"Host: {HOST}\r\n".encode()]
                       + [f"X-Drip-{i}: {i}\r\n".encode() for i in range(10_000)])
        self.slots = [_Slot() for _ in range(count)]
        self.selector = selectors.DefaultSelector()
        self.stopped = threading.Event()
        self.failed: BaseException | None = None
        self.stats = {"opened": 0, "connect_failures": 0, "closed_by_server": 0, "answered_by_server": 0,
                      "pieces_sent": 0}
        self.open_samples: list[int] = []

    def open_now(self) -> int:
        return sum(1 for s in self.slots if s.state == "open")

    def _open(self, slot: _Slot, now: float) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex((HOST, self.port))
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            self.stats["connect_failures"] += 1
            slot.reopen_at = now + REOPEN_DELAY
            return
        slot.sock, slot.state, slot.since = sock, "connecting", now
        self.selector.register(sock, selectors.EVENT_WRITE, slot)

    def _close(self, slot: _Slot, now: float, by_server: bool) -> None:
        if slot.sock is not None:
            try:
                self.selector.unregister(slot.sock)
            except (KeyError, ValueError):
                pass
            try:
                slot.sock.close()
            except OSError:
                pass
        if by_server:
            self.stats["closed_by_server"] += 1
        slot.sock, slot.state, slot.reopen_at = None, "closed", now + REOPEN_DELAY

    def _send_due(self, slot: _Slot, now: float) -> None:
        if self.mode != "drip" or slot.state != "open" or now < slot.next_send or slot.sent >= len(self.pieces):
            return
        assert slot.sock is not None
        try:
            slot.sock.send(self.pieces[slot.sent])
        except BlockingIOError:
            return
        except OSError:
            self._close(slot, now, by_server=True)
            return
        slot.sent += 1
        self.stats["pieces_sent"] += 1
        slot.next_send = now + DRIP_SECONDS

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001  # reported by the case, not lost in a thread
            self.failed = exc

    def _loop(self) -> None:
        last_sample = 0.0
        while not self.stopped.is_set():
            now = time.monotonic()
            for slot in self.slots:
                if slot.state == "closed" and now >= slot.reopen_at:
                    self._open(slot, now)
                elif slot.state == "connecting" and now - slot.since > CONNECT_GIVE_UP:
                    self.stats["connect_failures"] += 1
                    self._close(slot, now, by_server=False)
                else:
                    self._send_due(slot, now)
            for key, _ in self.selector.select(timeout=0.1):
                slot = key.data
                now = time.monotonic()
                if slot.state == "connecting":
                    error = slot.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if error:
                        self.stats["connect_failures"] += 1
                        self._close(slot, now, by_server=False)
                        continue
                    self.stats["opened"] += 1
                    slot.state, slot.sent, slot.next_send = "open", 0, now
                    self.selector.modify(slot.sock, selectors.EVENT_READ, slot)
                    self._send_due(slot, now)
                else:
                    try:
                        data = slot.sock.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data:
                        self.stats["answered_by_server"] += 1  # e.g. a 400/408: it closes next
                    else:
                        self._close(slot, now, by_server=True)
            if now - last_sample >= 0.25:
                self.open_samples.append(self.open_now())
                last_sample = now

    def stop(self) -> None:
        self.stopped.set()
        if self.is_alive():
            self.join(5.0)
        now = time.monotonic()
        for slot in self.slots:
            self._close(slot, now, by_server=False)
        self.selector.close()


class Sampler(threading.Thread):
    """The child's RSS, threads and file descriptors every 0.2 s: the peaks."""

    def __init__(self, ps: psutil.Process):
        super().__init__(daemon=True, name="sampler")
        self.ps = ps
        self.stopped = threading.Event()
        self.rss = self.threads = self.fds = 0

    def sample(self) -> None:
        try:
            with self.ps.oneshot():
                self.rss = max(self.rss, self.ps.memory_info().rss)
                self.threads = max(self.threads, self.ps.num_threads())
                self.fds = max(self.fds, self.ps.num_fds())
        except psutil.Error:
            pass

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            self.sample()

    def stop(self) -> None:
        self.stopped.set()
        self.join(2.0)
        self.sample()


def snapshot(ps: psutil.Process) -> dict[str, Any]:
    with ps.oneshot():
        times = ps.cpu_times()
        return {"rss_mb": round(ps.memory_info().rss / 2**20, 1), "threads": ps.num_threads(),
                "fds": ps.num_fds(), "cpu_s": times.user + times.system}


def summarize(probes: list[dict[str, Any]]) -> dict[str, Any]:
    answered = [p["seconds"] * 1000 for p in probes if p["ok"]]
    errors: dict[str, int] = {}
    for p in probes:
        if not p["ok"]:
            errors[p["error"]] = errors.get(p["error"], 0) + 1
    return {"sent": len(probes), "answered": len(answered),
            "p50_ms": round(statistics.median(answered), 2) if answered else None,
            "max_ms": round(max(answered), 2) if answered else None, "errors": errors}


def wait_healthy(port: int, tls: ssl.SSLContext | None, limit: float) -> float | None:
    """Seconds until /healthz answers (probing every 0.1 s with 1 s deadlines); None past ``limit``."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if probe(port, tls=tls)["ok"]:
            return round(time.monotonic() - start, 2)
        time.sleep(0.1)
    return None


def scheduled_probes(port: int, n: int, tls: ssl.SSLContext | None) -> list[dict[str, Any]]:
    """``n`` probes, one started every 0.25 s whatever the earlier ones are doing."""
    results: list[dict[str, Any] | None] = [None] * n
    threads = []
    start = time.monotonic()

    def one(i: int) -> None:
        results[i] = probe(port, tls=tls)

    for i in range(n):
        delay = start + i * PROBE_SPACING - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=one, args=(i,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(PROBE_DEADLINE + 2.0)
    return [r if r is not None else {"ok": False, "error": "probe hung", "seconds": PROBE_DEADLINE}
            for r in results]


# --------------------------------------------------------------------------- the cases

def run_case(kind: str, case: str, tls_dir: str | None, log_dir: str, args: argparse.Namespace) -> dict[str, Any]:
    tls = tls_client_context() if tls_dir else None
    result: dict[str, Any] = {"server": kind, "tls": bool(tls_dir), "case": case}
    started = time.monotonic()
    child = Child(kind, tls_dir, log_dir)
    attack: Attack | None = None
    sampler: Sampler | None = None
    try:
        ready = wait_healthy(child.port, tls, 10.0)
        if ready is None:
            raise RuntimeError(f"{kind} never answered /healthz; its log:\n{child.log_tail()}")
        for _ in range(5):  # warm up (lazily made pool threads, first-use imports)
            probe(child.port, tls=tls, deadline_s=5.0)
            probe(child.port, "/metrics", tls=tls, deadline_s=5.0, expect=None)
        time.sleep(0.3)
        before = snapshot(child.ps)
        result["before"] = {k: v for k, v in before.items() if k != "cpu_s"}
        sampler = Sampler(child.ps)
        sampler.start()
        if case == "idle":
            result["healthz"] = summarize([probe(child.port, tls=tls, deadline_s=5.0) for _ in range(50)])
            metrics = [probe(child.port, "/metrics", tls=tls, deadline_s=5.0, expect=None) for _ in range(20)]
            result["metrics"] = summarize(metrics)
            sizes = {m.get("bytes") for m in metrics if m["ok"]}
            result["metrics"]["body_bytes"] = sorted(sizes)
            if tls_dir:
                result["plain_http_on_tls_port"] = plain_http_to_tls_port(child.port)
        else:
            attack = Attack(child.port, case, args.connections, tls=bool(tls_dir))
            attack.start()
            up_deadline = time.monotonic() + 3.0  # all connected (or as many as the server lets)
            while time.monotonic() < up_deadline and attack.stats["opened"] < args.connections:
                time.sleep(0.05)
            time.sleep(1.0)  # let the server take them in (and the drip send its first pieces)
            result["attack_established"] = attack.open_now()
            result["healthz"] = summarize(scheduled_probes(child.port, args.probes, tls))
            samples = attack.open_samples[-int(args.probes * PROBE_SPACING / 0.25) - 4:]
            result["attack"] = dict(attack.stats, open_min=min(samples, default=0), open_max=max(samples, default=0),
                                    mode=case, connections=args.connections)
            if attack.failed is not None:
                result["attack"]["failed"] = repr(attack.failed)
        sampler.stop()
        after = snapshot(child.ps)
        result["peak"] = {"rss_mb": round(sampler.rss / 2**20, 1), "threads": sampler.threads, "fds": sampler.fds}
        result["cpu_s_during"] = round(after["cpu_s"] - before["cpu_s"], 2)
        if attack is not None:
            attack.stop()
            result["recovery_s"] = wait_healthy(child.port, tls, 6.0)
    except Exception as exc:  # noqa: BLE001  # one broken case must not lose the others
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if attack is not None:
            attack.stop()
        if sampler is not None and sampler.is_alive():
            sampler.stop()
        child.stop()
    result["case_seconds"] = round(time.monotonic() - started, 1)
    return result


def make_certificate(folder: str) -> bool:
    """server.crt/server.key (self-signed, P-256, IP:127.0.0.1) with openssl; False without openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return False
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", "server.key", "-out", "server.crt", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   cwd=folder, check=True, capture_output=True)
    return True


def package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


# --------------------------------------------------------------------------- the table

def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if value >= 100 else f"{value:.2f}"
    return str(value)


def table(results: list[dict[str, Any]]) -> str:
    header = ["server", "tls", "case", "answered", "p50 ms", "max ms", "failures", "rss MB before/peak",
              "threads before/peak", "fds peak", "cpu s", "attack open/closed by srv", "recover s"]
    rows = [header]
    for r in results:
        if "error" in r:
            rows.append([r["server"], "tls" if r["tls"] else "", r["case"], "ERROR: " + r["error"][:80]]
                        + [""] * (len(header) - 4))
            continue
        h = r["healthz"]
        failures = ", ".join(f"{n}x {e}" for e, n in h["errors"].items()) or "-"
        attack = r.get("attack")
        rows.append([
            r["server"], "tls" if r["tls"] else "", r["case"] + ("(healthz)" if r["case"] == "idle" else ""),
            f"{h['answered']}/{h['sent']}", fmt(h["p50_ms"]), fmt(h["max_ms"]), failures,
            f"{r['before']['rss_mb']}/{r['peak']['rss_mb']}", f"{r['before']['threads']}/{r['peak']['threads']}",
            str(r["peak"]["fds"]), fmt(r["cpu_s_during"]),
            f"{attack['open_min']}-{attack['open_max']}/{attack['closed_by_server']}" if attack else "",
            fmt(r.get("recovery_s")) if attack else ""])
        if r["case"] == "idle":
            m = r["metrics"]
            mfail = ", ".join(f"{n}x {e}" for e, n in m["errors"].items()) or "-"
            extra = f"plain HTTP on TLS port: {r['plain_http_on_tls_port']!r}" if "plain_http_on_tls_port" in r else ""
            rows.append(["", "", "idle(metrics)", f"{m['answered']}/{m['sent']}", fmt(m["p50_ms"]), fmt(m["max_ms"]),
                         mfail, "", "", "", "", extra, ""])
    widths = [max(len(row[i]) for row in rows if i < len(row) and not row[i].startswith("plain HTTP"))
              for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the results as JSON to this file")
    parser.add_argument("--servers", default=",".join(SERVERS), help=f"comma-separated subset of {SERVERS}")
    parser.add_argument("--cases", default="idle,flood,drip", help="comma-separated subset of idle,flood,drip")
    parser.add_argument("--no-tls", action="store_true", help="skip the TLS runs (sixdim, cheroot)")
    parser.add_argument("--connections", type=int, default=200, help="abusive connections (flood, drip)")
    parser.add_argument("--probes", type=int, default=20, help="/healthz probes during a flood or drip")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the child: run this server
    parser.add_argument("--tls-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve_child(args.serve, args.tls_dir)
        return 0

    servers = [s for s in args.servers.split(",") if s]
    cases = [c for c in args.cases.split(",") if c]
    for s in servers:
        if s not in SERVERS:
            parser.error(f"unknown server {s!r}")
    for c in cases:
        if c not in ("idle", "flood", "drip"):
            parser.error(f"unknown case {c!r}")

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # so the finally blocks below end every child

    signal.signal(signal.SIGTERM, terminate)
    meta = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "versions": {p: package_version(p) for p in ("sixdim", "waitress", "cheroot", "psutil")},
            "settings": {s: SETTINGS[s] for s in servers}, "connections": args.connections, "probes": args.probes,
            "probe_deadline_s": PROBE_DEADLINE, "probe_spacing_s": PROBE_SPACING, "drip_every_s": DRIP_SECONDS,
            "metrics_body_bytes": len(metrics_body())}
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sixdim-http-bench-") as work:
        plan = [(s, None) for s in servers]
        if not args.no_tls:
            tls_dir = os.path.join(work, "tls")
            os.mkdir(tls_dir)
            try:
                have_tls = make_certificate(tls_dir)
            except subprocess.CalledProcessError as exc:
                print(f"no TLS runs: openssl failed: {exc.stderr.decode(errors='replace')[:200]}", file=sys.stderr)
                have_tls = False
            if have_tls:
                plan += [(s, tls_dir) for s in servers if s in TLS_SERVERS]
            else:
                meta["tls_skipped"] = "no openssl on the PATH"
        for kind, tls_dir in plan:
            for case in cases:
                result = run_case(kind, case, tls_dir, work, args)
                results.append(result)
                h = result.get("healthz", {})
                failed = "  " + result["error"] if "error" in result else ""
                print(f"  {kind:15} {'tls' if tls_dir else '   '} {case:6} "
                      f"{h.get('answered', '-')}/{h.get('sent', '-')} answered  ({result['case_seconds']} s){failed}",
                      file=sys.stderr, flush=True)
    meta["total_seconds"] = round(time.monotonic() - started, 1)
    print()
    print(f"waitress {meta['versions']['waitress']}, cheroot {meta['versions']['cheroot']}, "
          f"Python {meta['python']}, {meta['cpus']} CPUs; {args.connections} abusive connections, "
          f"{args.probes} probes every {PROBE_SPACING} s with a {PROBE_DEADLINE} s deadline, "
          f"drip every {DRIP_SECONDS} s")
    for s in servers:
        print(f"  {s}: {SETTINGS[s]}")
    print()
    print(table(results))
    print(f"\ntotal {meta['total_seconds']} s")
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
