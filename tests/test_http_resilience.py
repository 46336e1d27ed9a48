"""The endpoint under the faults and attacks of issue 30's matrix (agent/http/server.py, agent/http/webconfig.py):
slow and stalled clients, a wrong-password flood, TLS clients that hang up.  A real server in a child process
(``HttpServer`` with the daemon's defaults, its log on stderr as the daemon's is), real sockets, real TLS and
bcrypt; the attackers and the probes run here.

The bounds are behaviours, not micro-timings: a probe must answer within 1 s (the server's own work is
milliseconds) while hundreds of connections attack it, which the previous server failed outright (every probe
timed out or was refused)."""

from __future__ import annotations

import base64
import errno
import gzip
import http.client
import os
import secrets
import selectors
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

bcrypt = pytest.importorskip("bcrypt")
pytest.importorskip("yaml")

from sixdim.config import ConfigError  # noqa: E402
from sixdim.http import server as http_server  # noqa: E402
from sixdim.http import webconfig  # noqa: E402
from sixdim.http.server import HttpServer, make_app  # noqa: E402
from tests.certs import issue, make_ca  # noqa: E402
from tests.test_http_head_limits import exchange  # noqa: E402

pytestmark = pytest.mark.slow  # each test starts a server and attacks it for a few seconds

ROOT = Path(__file__).resolve().parent.parent
TEXT = b"# HELP x test\n# TYPE x gauge\nx 1.0\n"
PASSWORD = "s3cret pass"
CHEAP_HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
PROBE_DEADLINE = 1.0
"""A probe answers within this (connect, TLS, request and whole answer) or fails."""
ATTACKER_ADDRESSES = [f"127.0.0.{n}" for n in range(2, 10)]
"""The attackers' source addresses (all of 127/8 is the loopback): several hosts, as in a real flood, and not
the probes' 127.0.0.1."""

CHILD = r"""
import gzip, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
from sixdim.http import server as http, webconfig
from sixdim.http.server import HttpServer, make_app

TEXT = b"# HELP x test\n# TYPE x gauge\nx 1.0\n"

class Source:
    def body(self):
        return TEXT

    def gzipped(self):
        return gzip.compress(TEXT)

path, read_timeout, log_interval = sys.argv[1:4]
if log_interval:
    http.CONNECTION_LOG_INTERVAL = http._events.interval = float(log_interval)
web = webconfig.load(path) if path else None
options = {"read_timeout": float(read_timeout)} if read_timeout else {}
server = HttpServer("127.0.0.1", 0, make_app(Source(), lambda: (True, "ok")), web=web, **options)
print(server.port, flush=True)
sys.stdin.read()  # until the test closes our stdin
server.shutdown()
"""


# --------------------------------------------------------------------------- the server, in a child

@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    make_ca(d)
    issue(d, "server", "localhost", "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n"
          "extendedKeyUsage=serverAuth\n")
    return d


@dataclass
class Server:
    port: int
    context: ssl.SSLContext | None
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def child_server(tmp_path: Path, web: str | None, certs: Path | None = None, read_timeout: float | None = None,
                 log_interval: float | None = None) -> Iterator[Server]:
    """``HttpServer`` in a child process (its own GIL, as the daemon's), with the web configuration ``web``
    (YAML text; None: plain HTTP without auth)."""
    path = ""
    if web is not None:
        (tmp_path / "web.yml").write_text(web)
        path = str(tmp_path / "web.yml")
    log = tmp_path / "server.log"
    env = dict(os.environ)  # the sixdim this test imports (installed, or first on PYTHONPATH)
    with open(log, "wb") as stderr:
        child = subprocess.Popen([sys.executable, "-c", CHILD, path, "" if read_timeout is None else str(read_timeout),
                                  "" if log_interval is None else str(log_interval)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT, env=env)
    try:
        line = child.stdout.readline()  # type: ignore[union-attr]
        assert line.strip().isdigit(), f"the server did not start: {line!r} {log.read_text()}"
        context = None
        if certs is not None:
            context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        yield Server(int(line), context, log)
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        child.stdout.close()  # type: ignore[union-attr]


def tls_config(certs: Path) -> str:
    return f"tls_server_config:\n  cert_file: {certs}/server.crt\n  key_file: {certs}/server.key\n"


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


AUTHORISED = basic("prometheus", PASSWORD)


def request(server: Server, path: str, headers: dict | None = None, timeout: float = PROBE_DEADLINE,
            source: str = "127.0.0.1") -> tuple[int, float]:
    """(status, seconds) of one GET; raises OSError / HTTPException when it fails."""
    started = time.monotonic()
    if server.context is not None:
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            "127.0.0.1", server.port, context=server.context, timeout=timeout, source_address=(source, 0))
    else:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout, source_address=(source, 0))
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        response.read()
        return response.status, time.monotonic() - started
    finally:
        connection.close()


def probe(server: Server, path: str, headers: dict | None = None) -> str | float:
    """The seconds a 200 took, or what went wrong (a failure, another status, an answer past the deadline)."""
    try:
        status, seconds = request(server, path, headers)
    except (OSError, http.client.HTTPException) as exc:
        return f"{path}: {type(exc).__name__} {exc}"
    if status != 200:
        return f"{path}: {status}"
    if seconds > PROBE_DEADLINE:
        return f"{path}: {seconds:.2f} s"
    return seconds


def probes_during(server: Server, seconds: float, every: float = 0.2) -> list[str | float]:
    """/healthz and authorised /metrics, alternately, one started every ``every`` seconds for ``seconds``."""
    results: list[str | float] = []
    end = time.monotonic() + seconds
    paths = [("/healthz", None), ("/metrics", AUTHORISED)]
    while time.monotonic() < end:
        started = time.monotonic()
        path, headers = paths[len(results) % 2]
        results.append(probe(server, path, headers))
        time.sleep(max(0.0, every - (time.monotonic() - started)))
    return results


def failures(results: list[str | float]) -> list[str]:
    return [r for r in results if isinstance(r, str)]


# --------------------------------------------------------------------------- slow and stalled clients

def client_hello() -> bytes:
    """The first flight of a real TLS client: a ClientHello record (starts 0x16 0x03 0x01)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    assert hello[:1] == b"\x16"
    return hello


@dataclass
class Script:
    """What one slow client sends: ``first`` at once, then ``then`` ``step`` bytes every interval (over
    and over when ``cycle``, else until it runs out: a stall)."""

    first: bytes
    then: bytes = b""
    step: int = 0
    cycle: bool = False


@dataclass
class _Slow:
    sock: socket.socket
    script: Script
    index: int
    sent: int = 0
    connected: bool = False


@dataclass
class SlowClients:
    """``len(scripts)`` connections held open against ``port`` by one thread and a selector, from
    :data:`ATTACKER_ADDRESSES` in turn; each plays its :class:`Script`.  A connection the server closes is
    opened again at once (a real flood does), so the pressure lasts."""

    port: int
    scripts: list[Script]
    interval: float = 1.0
    sources: list[str] = field(default_factory=lambda: list(ATTACKER_ADDRESSES))
    up_fraction: float = 0.9
    """The share of the connections that must be open before the attack counts as started."""
    opened: int = 0
    closed_by_server: int = 0
    peak_open: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _up: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> SlowClients:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._up.wait(5)  # (a server that refuses them fails the probes, not this)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(10)

    def _open(self, selector: selectors.BaseSelector, index: int) -> None:
        sock = socket.socket()
        sock.bind((self.sources[self.opened % len(self.sources)], 0))
        sock.setblocking(False)
        self.opened += 1
        code = sock.connect_ex(("127.0.0.1", self.port))
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            return
        selector.register(sock, selectors.EVENT_WRITE, _Slow(sock, self.scripts[index], index))

    def _lost(self, selector: selectors.BaseSelector, slow: _Slow) -> None:
        selector.unregister(slow.sock)
        slow.sock.close()
        self.closed_by_server += 1
        self._reopen.append(slow.index)

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        self._reopen: list[int] = []
        for index in range(len(self.scripts)):
            self._open(selector, index)
        next_drip = time.monotonic() + self.interval
        while not self._stop.is_set():
            for key, _events in selector.select(timeout=0.05):
                slow: _Slow = key.data
                if not slow.connected:
                    if slow.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                        self._lost(selector, slow)
                        continue
                    slow.connected = True
                    try:
                        slow.sock.send(slow.script.first)
                    except OSError:
                        self._lost(selector, slow)
                        continue
                    selector.modify(slow.sock, selectors.EVENT_READ, slow)
                    continue
                try:
                    data = slow.sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._lost(selector, slow)
            while self._reopen:
                self._open(selector, self._reopen.pop())
            live = [key.data for key in selector.get_map().values()]
            connected = sum(1 for slow in live if slow.connected)
            self.peak_open = max(self.peak_open, connected)
            if connected >= len(self.scripts) * self.up_fraction:
                self._up.set()
            if time.monotonic() >= next_drip:
                next_drip += self.interval
                for slow in live:
                    script = slow.script
                    if not slow.connected or not script.step or (not script.cycle and slow.sent >= len(script.then)):
                        continue
                    start = slow.sent % len(script.then) if script.cycle else slow.sent
                    try:
                        slow.sock.send(script.then[start:start + script.step])
                        slow.sent += script.step
                    except BlockingIOError:
                        pass
                    except OSError:
                        self._lost(selector, slow)
        for key in list(selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        selector.close()


HEADER_DRIP = Script(b"GET /metrics HTTP/1.1\r\nHost: sixdim\r\n", b"X-Drip: 1\r\n", step=11, cycle=True)
"""A request head that never ends: a header line every interval (each read finds data in time)."""


def test_500_dripping_plain_clients_do_not_delay_healthz_or_scrapes(tmp_path):
    """Issue 30: 8 connections dripping a header line every 2.5 s made every /healthz fail; 200 failed every
    probe.  Here 500 drip one every second (so every read of the old server found data within its 5 s
    per-read timeout) for over a read timeout, reconnecting when closed; /healthz and authorised /metrics
    must each answer within 1 s throughout."""
    with child_server(tmp_path, f"basic_auth_users:\n  prometheus: '{CHEAP_HASH}'\n") as server:
        assert isinstance(probe(server, "/metrics", AUTHORISED), float)  # warm: the success is cached
        with SlowClients(server.port, [HEADER_DRIP] * 500) as attack:
            results = probes_during(server, 6.0)
        failed = failures(results)
        assert not failed, f"{len(failed)} of {len(results)} probes failed: {failed[:5]}"
        assert attack.peak_open >= 450, "the attack never held its connections"


def test_500_stalled_and_dripped_tls_handshakes_do_not_delay_healthz_or_scrapes(tmp_path, certs):
    """Issue 30: 200 TLS connections that send 6 bytes of a ClientHello and stop failed 11 of 12 probes.
    Here 250 stall after 6 bytes and 250 drip a real ClientHello a few bytes a second (never finishing
    within the read timeout); /healthz and authorised /metrics over TLS must each answer within 1 s."""
    hello = client_hello()
    scripts = [Script(hello[:6])] * 250 + [Script(hello[:1], hello[1:], step=4)] * 250
    web = tls_config(certs) + f"basic_auth_users:\n  prometheus: '{CHEAP_HASH}'\n"
    with child_server(tmp_path, web, certs) as server:
        assert isinstance(probe(server, "/metrics", AUTHORISED), float)
        with SlowClients(server.port, scripts) as attack:
            results = probes_during(server, 6.0)
        failed = failures(results)
        assert not failed, f"{len(failed)} of {len(results)} probes failed: {failed[:5]}"
        assert attack.peak_open >= 450, "the attack never held its connections"


def test_a_request_head_has_a_total_deadline_and_a_size_limit(tmp_path):
    """A connection that keeps dripping is closed once its head has taken the read timeout in all (not each
    read), and a head past the limit is answered 431 and closed; the server still answers."""
    with child_server(tmp_path, None, read_timeout=1.5) as server:
        dripper = socket.create_connection(("127.0.0.1", server.port))
        dripper.sendall(b"GET /metrics HTTP/1.1\r\n")
        dripper.settimeout(0.3)
        started, closed_after = time.monotonic(), None
        while time.monotonic() - started < 6.0:
            try:
                if dripper.recv(4096) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                pass
            except OSError:  # reset
                closed_after = time.monotonic() - started
                break
            try:
                dripper.sendall(b"X-Drip: 1\r\n")
            except OSError:
                closed_after = time.monotonic() - started
                break
        dripper.close()
        assert closed_after is not None, "a dripping connection was never closed"
        assert closed_after < 1.5 + 2.0

        answer = exchange(server.port, b"GET /metrics HTTP/1.1\r\n" + b"".join(
            b"X-Big-%d: %s\r\n" % (n, b"x" * 1000) for n in range(90)))
        assert answer == b"" or answer.startswith(b"HTTP/1.0 431"), answer[:100]
        assert isinstance(probe(server, "/healthz"), float)


def test_many_clients_from_one_address_cannot_crowd_out_another(tmp_path):
    """More stalled connections than the waiting room holds, all from one address (and reopened as soon as
    they are closed): each newcomer displaces that address's oldest, so a connection from anywhere else
    still gets in, and /healthz answers throughout."""
    with child_server(tmp_path, None, read_timeout=30.0) as server:
        with SlowClients(server.port, [Script(b"GET /healthz HTTP/1.1\r\n")] * (http_server.WAITING + 200),
                         sources=["127.0.0.2"], up_fraction=0.0) as attack:
            time.sleep(0.5)  # the room is full, and churning
            results = [probe(server, "/healthz") for _ in range(10)]
        assert not failures(results), failures(results)
        assert attack.closed_by_server >= 100, "the waiting room never filled"


# --------------------------------------------------------------------------- a wrong-password flood

def test_a_wrong_password_flood_does_not_slow_authorised_scrapes_or_healthz(tmp_path):
    """Issue 30: 300 wrong passwords, 32 at a time, at bcrypt cost 12, pushed /healthz and authorised
    scrapes to 15 s, with failures.  Here 32 clients send distinct wrong passwords back to back for 4 s
    (each would cost a 250 ms bcrypt); authorised scrapes (whose success is cached) and /healthz must
    each answer within 500 ms, and the flood still gets its 401s (or 429s: not now)."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(12)).decode()
    with child_server(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n") as server:
        assert request(server, "/metrics", AUTHORISED, timeout=10)[0] == 200  # the one bcrypt of the scraper
        stop = threading.Event()
        answers: dict[int | str, int] = {}
        lock = threading.Lock()

        def flood(source: str) -> None:
            while not stop.is_set():
                try:
                    status = request(server, "/metrics", basic("prometheus", secrets.token_hex(8)), timeout=30,
                                     source=source)[0]
                except (OSError, http.client.HTTPException) as exc:
                    status = type(exc).__name__  # type: ignore[assignment]
                with lock:
                    answers[status] = answers.get(status, 0) + 1

        threads = [threading.Thread(target=flood, args=(ATTACKER_ADDRESSES[n % 8],), daemon=True) for n in range(32)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        latencies: list[str | float] = []
        end = time.monotonic() + 4.0
        while time.monotonic() < end:
            for path, headers in (("/healthz", None), ("/metrics", AUTHORISED)):
                try:
                    status, seconds = request(server, path, headers, timeout=30)
                    latencies.append(seconds if status == 200 else f"{path}: {status}")
                except (OSError, http.client.HTTPException) as exc:
                    latencies.append(f"{path}: {type(exc).__name__}")
            time.sleep(0.1)
        stop.set()
        for thread in threads:
            thread.join(40)
        assert not failures(latencies), failures(latencies)[:5]
        worst = max(x for x in latencies if isinstance(x, float))
        assert worst < 0.5, f"an authorised scrape or /healthz took {worst:.2f} s during the flood ({answers})"
        assert answers.get(401, 0) >= 1, answers  # the flood was judged, not dropped
        assert set(answers) <= {401, 429}, answers
        assert request(server, "/metrics", basic("prometheus", "wrong"), timeout=10)[0] in (401, 429)
        assert request(server, "/metrics", AUTHORISED, timeout=10)[0] == 200


def test_failed_checks_are_cached_and_bcrypt_checks_are_bounded(monkeypatch):
    """A wrong password seen before costs a hash, not a bcrypt; while the one check runs, one request per other
    address waits its turn (at most FAIR_WAIT_SECONDS) and a second one of an address already waiting is
    answered "busy" at once; a verified credential never waits."""
    monkeypatch.setattr(webconfig, "FAIR_WAIT_SECONDS", 1.0)
    auth = webconfig.BasicAuth({"prometheus": CHEAP_HASH})
    calls = []
    real = bcrypt.checkpw
    release = threading.Event()

    def counted(*args):
        calls.append(1)
        if args[0] == b"slow":
            release.wait(10)
        return real(*args)

    monkeypatch.setattr(auth._bcrypt, "checkpw", counted)
    assert not auth.check("prometheus", "wrong") and not auth.check("prometheus", "wrong")
    assert len(calls) == 1  # the second wrong guess was answered from the cache
    assert auth.check("prometheus", PASSWORD) and auth.check("prometheus", PASSWORD) and len(calls) == 2
    holder = threading.Thread(target=auth.verify, args=(basic("prometheus", "slow")["Authorization"], "10.0.0.1"))
    holder.start()
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    verdicts: dict[str, str] = {}
    waiter = threading.Thread(target=lambda: verdicts.update(first=auth.verify(
        basic("prometheus", "another")["Authorization"], "10.0.0.99")))
    waiter.start()
    time.sleep(0.1)
    started = time.monotonic()
    assert auth.verify(basic("prometheus", "third")["Authorization"], "10.0.0.99") == webconfig.BUSY
    assert time.monotonic() - started < 0.1  # its address already waits: at once
    assert auth.verify(AUTHORISED["Authorization"], "10.0.0.99") == webconfig.OK  # verified: never waits
    waiter.join(5)
    assert verdicts["first"] == webconfig.BUSY  # no turn within the wait: the slow check held it
    release.set()
    holder.join(10)
    assert auth.verify(basic("prometheus", "another")["Authorization"], "10.0.0.99") == webconfig.DENIED


def test_a_flood_from_one_address_leaves_the_check_to_another():
    """Issue 44: distinct wrong passwords from one address, 32 at a time, kept the one bcrypt check busy, and a
    scraper whose credentials were not yet verified (just started, or just reloaded) got 429 every time.  Now
    the address served least recently takes the check next: the scraper waits behind one check at most; and a
    reload keeps what was verified."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    auth = webconfig.BasicAuth({"prometheus": hashed})
    stop = threading.Event()

    def flood(n: int) -> None:
        for k in range(10**6):
            if stop.is_set():
                return
            auth.verify(basic("prometheus", f"wrong-{n}-{k}")["Authorization"], "127.0.0.2")
    threads = [threading.Thread(target=flood, args=(n,), daemon=True) for n in range(32)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        started = time.monotonic()
        assert auth.verify(basic("prometheus", PASSWORD)["Authorization"], "127.0.0.1") == webconfig.OK
        assert time.monotonic() - started < webconfig.FAIR_WAIT_SECONDS  # behind one check of the flood at most
        reloaded = webconfig.BasicAuth({"prometheus": hashed})  # a SIGHUP's new configuration
        started = time.monotonic()
        assert reloaded.verify(basic("prometheus", PASSWORD)["Authorization"], "127.0.0.1") == webconfig.OK
        assert time.monotonic() - started < 0.05  # no bcrypt: remembered across the reload
        changed = webconfig.BasicAuth({"prometheus": bcrypt.hashpw(b"new", bcrypt.gensalt(4)).decode()})
        assert changed.verify(basic("prometheus", PASSWORD)["Authorization"], "127.0.0.1") != webconfig.OK
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


def test_a_bcrypt_cost_above_the_cap_is_refused(tmp_path):
    low, high = webconfig.BCRYPT_COSTS
    assert high <= 12
    too_costly = f"$2b${high + 1:02d}$" + "a" * 53
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  prometheus: '{too_costly}'\n")
    with pytest.raises(ConfigError, match=f"cost {low} to {high}"):
        webconfig.load(str(tmp_path / "web.yml"))


# --------------------------------------------------------------------------- TLS clients that hang up

def _hang_up(port: int, context: ssl.SSLContext, how: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        if how == 0:  # mid-handshake
            sock.sendall(client_hello()[:40])
            return
        tls = context.wrap_socket(sock, server_hostname="127.0.0.1")
        if how == 1:  # after the handshake, before the request
            return
        tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: sixdim\r\n\r\n")
        if how == 3:  # a reset rather than a close
            tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        sock.close()


def test_tls_clients_that_hang_up_write_at_most_one_line_now_and_then(tmp_path, certs):
    """Issue 30: 100 TLS clients that hung up wrote 27 tracebacks (~23 lines each) into the log.  Now
    each kind of event makes at most one line per interval (1 s here, 10 s in the daemon), and a line
    counts the events held back since the last."""
    interval = 1.0
    with child_server(tmp_path, tls_config(certs), certs, log_interval=interval) as server:
        assert server.context is not None
        started = time.monotonic()
        for n in range(100):
            _hang_up(server.port, server.context, n % 4)
        assert isinstance(probe(server, "/healthz"), float)
        time.sleep(interval + 0.2)  # past the interval: the next event's line counts those held back
        for n in range(20):
            _hang_up(server.port, server.context, (0, 2)[n % 2])
        assert isinstance(probe(server, "/healthz"), float)
        elapsed = time.monotonic() - started
        time.sleep(0.3)
        log = server.log_text()
    lines = [line for line in log.splitlines() if line.strip()]
    assert "Traceback" not in log, log[:3000]
    assert all(line.split(" ", 1)[0] in ("INFO", "WARNING", "ERROR") for line in lines), log[:3000]  # one line each
    kinds = {"handshake": [line for line in lines if "handshake" in line],
             "hangup": [line for line in lines if "hung up" in line]}
    assert sum(map(len, kinds.values())) == len(lines), log[:3000]
    for kind, found in kinds.items():
        assert 1 <= len(found) <= elapsed / interval + 1, (kind, log[:3000])
    assert any("more such since the last" in line for line in lines), log[:3000]


def test_in_process_server_still_serves_plain_and_is_closed_cleanly():
    """The API the daemon uses is unchanged: construct, serve, shut down."""
    class Source:
        def body(self):
            return TEXT

        def gzipped(self):
            return gzip.compress(TEXT)

    server = HttpServer("127.0.0.1", 0, make_app(Source(), lambda: (True, "ok")))
    try:
        assert request(Server(server.port, None, Path("/dev/null")), "/metrics")[0] == 200
        assert http_server.MAX_HEAD_BYTES >= 8192
    finally:
        server.shutdown()
