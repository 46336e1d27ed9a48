"""The HTTP endpoint: /metrics (Prometheus text format) and /healthz.

A scrape is served from the exposition cache (:mod:`sixdim.http.exposition`): the bytes rendered in the
background, gzip-compressed when the scraper asks for it (Prometheus always does), so a scrape
costs a memory copy, whatever the history holds.

**Reading a request holds no thread.**  An accepted connection goes to the **waiting room**
(:class:`_WaitingRoom`: one thread and a selector, at most :data:`WAITING` connections, fewer under a low
open-file limit), which does
everything a client can make slow without a thread of its own: with TLS, it tells TLS from plain
HTTP and does the handshake, non-blocking; then it reads the request head until its blank line.
A connection has :data:`READ_TIMEOUT_SECONDS` **in all** for that (handshake and head together,
however it spreads its bytes: a client that drips a header line a second is closed at the deadline
all the same).  The head is checked **line by line as it arrives**, whether or not its blank line has
come yet: a request line longer than :data:`MAX_LINE_BYTES` is answered ``414 URI Too Long`` (RFC 9110's
status for a request target the server will not read, and what a client can act on: a shorter URL), a
header line longer than that, or a head (request line, headers and blank line) past
:data:`MAX_HEAD_BYTES`, ``431 Request Header Fields Too Large``; either way the connection is closed
before any of it is parsed, at the first read that passes the limit.  When the room is
full, a new connection makes room by closing the oldest waiting connection of the **client address
that holds the most**: one host's flood displaces its own connections, not a scraper's.

**The connections held are capped from the open-file limit** (:class:`ConnectionCap`): every one takes a
file descriptor, and a server that took them all would leave none for the suites it runs (their pipes and
files fail with EMFILE) or for the next ``/healthz``.  The daemon passes its soft RLIMIT_NOFILE (raised to
the hard limit at start); the room, the connections accepted but not yet in it and the pool together hold
at most the limit less the descriptors open at start and :data:`RESERVED_FILES`, and never more than the
defaults.  When the connections waiting to be taken in are at their cap, the accepting thread waits for
the room (the next ones stay in the kernel's backlog, holding nothing) rather than refusing them, so a
probe from another address still gets in, displacing a flood's connection.

Only a complete request head reaches the **bounded pool** (:data:`WORKERS` threads, :data:`QUEUED`
more waiting, fewer in all under a low open-file limit; beyond that a connection is closed at once and
counted in the log), so a pool thread parses a head it already has, runs the app and writes the answer,
and the whole answer must be written within the read timeout too.  So slow, silent, half-open or dripping
connections, in the clear or mid-handshake, hold no pool thread at all, and ``/healthz`` and scrapes go on answering
through hundreds of them (``tests/test_http_resilience.py``).

With a web configuration file (:mod:`sixdim.http.webconfig`), the endpoint serves **TLS** and/or asks
for **basic auth**.  A client that speaks plain HTTP to the TLS port gets ``400 Client sent an HTTP
request to an HTTPS server`` (as Go's servers answer) and the connection is closed; one whose
certificate is missing, not signed by the client CA or without an allowed SAN is dropped at the
handshake.  Basic auth guards every path except ``/healthz`` and ``/health``: liveness probes (the
kubelet's, systemd's) carry no credentials, and the answer tells nothing but "the scheduler runs".
A credential the pool cannot check now (bcrypt busy, see :class:`sixdim.http.webconfig.BasicAuth`)
is answered ``429`` at once.  The configured security headers go on every response, 401s and 404s
included.

What clients do wrong (hang up, time out, fail a handshake, overflow the room) is logged as **one
line**, at most one per kind every :data:`CONNECTION_LOG_INTERVAL` seconds, counting the events it
stands for: never a traceback, whatever a client does.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import selectors
import socket
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sixdim.core.loglines import LogLimiter
from sixdim.http.webconfig import BUSY, OK, REALM

if TYPE_CHECKING:
    from sixdim.http.webconfig import WebConfig

log = logging.getLogger("sixdim")

WORKERS = 8
"""Requests served at once (each with its head already read)."""
QUEUED = 64
"""Complete requests waiting for a worker; beyond this a connection is closed at once."""
WAITING = 512
"""Connections still sending their request head (or TLS handshake), held without a thread; beyond
this a new connection displaces the oldest one of the address holding the most (the process's file
descriptors are the limit this protects)."""
READ_TIMEOUT_SECONDS = 5.0
"""How long a connection has, in all, for its TLS handshake and request head; and, from the moment
its answer starts, for taking the whole answer."""
MAX_HEAD_BYTES = 32 * 1024
"""The largest request head read (request line, headers and the blank line); a bigger one is answered
431, complete or not.  A Prometheus scrape's is about 300 bytes."""
MAX_LINE_BYTES = 8 * 1024
"""The longest line of a request head, its line ending included (Apache's and nginx's default is 8 KiB
too): a longer request line is answered 414, a longer header line 431."""
REFUSED_DRAIN_BYTES = 256 * 1024
"""At most this much of what a refused client has already sent is read and dropped before its connection
is closed, so that the close does not reset the connection under the answer (a close with unread bytes
sends a TCP reset, and the client may lose the answer with it)."""
BACKLOG = 1024
"""The listen backlog: connections the kernel completes before the accepting thread takes them.  Deep
enough for a burst of reconnections (hundreds of slow clients closed at their deadline come back at
once), so a scraper's connection is not dropped there and retried a second later."""
CONNECTION_LOG_INTERVAL = 10.0
"""At most one log line per kind of connection trouble in this many seconds."""
OPEN_PATHS = ("/healthz", "/health", "/livez")
"""Paths served without basic auth: liveness probes carry no credentials."""
PLAIN_HTTP_ANSWER = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
                     b"Client sent an HTTP request to an HTTPS server.\n")
HEAD_TOO_LARGE_ANSWER = (b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\n"
                         b"Connection: close\r\n\r\nRequest head too large.\n")
LINE_TOO_LONG_ANSWER = (b"HTTP/1.0 414 URI Too Long\r\nContent-Type: text/plain\r\n"
                        b"Connection: close\r\n\r\nRequest line too long.\n")
RESERVED_FILES = 16
"""File descriptors kept out of the HTTP server's reach, beyond those open when it starts, for what the rest
of the agent opens later whatever it runs: the history's SQLite files (database, WAL and shared memory, for
each connection: the restore's, the pruner's, the change watch's), ``/proc`` and ``/sys`` reads for
telemetry, a log file reopened, and one ``/healthz`` accepted while the room is full, before it displaces a
connection."""
RUN_FILES = 16
"""And this many more for each device a suite can run on at once (runs on one device take turns): a run
took 9 at its peak in the daemon (its worker's pipes and the fork's, the worker record and results files, a
device lock, the run's cgroup), measured with ``tests/test_fd_limits.py``'s schedule (dev-cpu, 2 vCPU Xeon,
shared, 2026-11-29); the rest is margin."""
ARRIVAL_WAIT_SECONDS = 1.0
"""How long the accepting thread waits for the waiting room to take in an accepted connection when
:attr:`ConnectionCap.arriving` are already waiting for it, before refusing it."""
MIN_CONNECTIONS = 3
"""The fewest connections the server holds whatever the limit (one waiting, one arriving, one in the pool):
below that it could not serve at all."""
_TLS_HANDSHAKE = 0x16
"""The first byte of every TLS connection (a handshake record); anything else is not TLS."""


class MetricsSource(Protocol):
    """What /metrics serves: the exposition cache's interface."""

    def body(self) -> bytes: ...
    def gzipped(self) -> bytes: ...


# --------------------------------------------------------------------------- one line, now and then

_events = LogLimiter(log, CONNECTION_LOG_INTERVAL)
"""One log line per kind of connection trouble every :data:`CONNECTION_LOG_INTERVAL` seconds."""


def _why(exc: BaseException) -> str:
    """An exception as a short phrase for a log line: its type and reason, one line."""
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc) or "no detail"
    return f"{type(exc).__name__}: {reason}".replace("\n", " ")[:200]


def _peer(address: object) -> str:
    return str(address[0]) if isinstance(address, tuple) and address else str(address)


# --------------------------------------------------------------------------- the connection cap

@dataclass(frozen=True)
class ConnectionCap:
    """How many client connections the server holds at most, from the process's open-file limit: each takes a
    descriptor, and a server that takes them all leaves none for the runs it reports on (EMFILE) or for the
    next ``/healthz``.  ``waiting`` (the waiting room), ``arriving`` (accepted, not yet in the room) and
    ``pool`` (requests in progress or queued) together are :attr:`total`, which is at most the limit less the
    descriptors open at start (``in_use``) and those kept in ``reserve`` (:func:`reserve_for`); where the
    limit is high enough, the defaults (:data:`WAITING` each for the first two, :data:`WORKERS` +
    :data:`QUEUED`)."""

    limit: int
    in_use: int
    reserve: int
    waiting: int
    arriving: int
    pool: int

    @property
    def total(self) -> int:
        return self.waiting + self.arriving + self.pool

    @property
    def short(self) -> bool:
        """True when the limit cannot keep the reserve even at :data:`MIN_CONNECTIONS`."""
        return self.limit - self.in_use - self.reserve < MIN_CONNECTIONS

    def describe(self) -> str:
        return (f"at most {self.total} client connections ({self.waiting} sending their request, {self.arriving} "
                f"being taken in, {self.pool} in progress or queued) from the open-file limit {self.limit}, "
                f"{self.in_use} open at start and {self.reserve} kept for runs, the history and /healthz")


def reserve_for(devices: int) -> int:
    """The descriptors kept from the HTTP server for an agent whose suites run on ``devices`` devices."""
    return RESERVED_FILES + RUN_FILES * max(1, devices)


def connection_cap(limit: int, in_use: int, reserve: int) -> ConnectionCap:
    """The cap for an open-file ``limit`` (the soft RLIMIT_NOFILE) with ``in_use`` descriptors open now and
    ``reserve`` to keep for the rest of the agent."""
    free = limit - in_use - reserve
    if free >= 2 * WAITING + WORKERS + QUEUED:
        return ConnectionCap(limit, in_use, reserve, WAITING, WAITING, WORKERS + QUEUED)
    free = max(free, MIN_CONNECTIONS)
    pool = min(max(free // 4, 1), WORKERS + QUEUED)
    arriving = min(max(free // 8, 1), WAITING)
    return ConnectionCap(limit, in_use, reserve, min(free - pool - arriving, WAITING), arriving, pool)


def open_files() -> int:
    """Descriptors this process has open now (0 where ``/proc`` is not mounted: the cap is then the limit's)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listing it
    except OSError:
        return 0


# --------------------------------------------------------------------------- the request handler

class _HeadThenSocket(io.RawIOBase):
    """A request's bytes: the head the waiting room read, then whatever the socket has."""

    def __init__(self, head: bytes, sock: socket.socket):
        self._head = memoryview(head)
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._sock.recv_into(buffer)


class _DeadlineWriter(io.BufferedIOBase):
    """Writes to the socket until a deadline for the whole answer, not for each send: a client that
    reads a byte now and then cannot hold a pool thread longer than the read timeout."""

    def __init__(self, sock: socket.socket, seconds: float):
        self._sock = sock
        self._seconds = seconds
        self._deadline: float | None = None

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[no-untyped-def, override]
        if self._deadline is None:
            self._deadline = time.monotonic() + self._seconds
        view = memoryview(data).cast("B")
        sent = 0
        while sent < len(view):
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the client took more than {self._seconds:g} s to read the answer")
            self._sock.settimeout(left)
            sent += self._sock.send(view[sent:])
        return sent


class _ServerHandler(ServerHandler):
    """wsgiref's handler, quiet: a client that hung up (a reset, a broken pipe, a TLS EOF, a timeout)
    is one line now and then, not a traceback on stderr; an error of the app is one line too."""

    environ: dict[str, Any]  # wsgiref's BaseHandler sets both as it runs; typeshed does not declare them
    headers_sent: bool

    def handle_error(self) -> None:
        exc = sys.exc_info()[1]
        address = self.request_handler.client_address  # type: ignore[attr-defined]
        if isinstance(exc, OSError):  # the connection failed under the answer: nothing to answer
            _events.note("hangup", logging.INFO, "http: %s hung up or stalled mid-request: %s", _peer(address),
                         _why(exc))
            self.close()
            return
        _events.note("app", logging.ERROR, "http: error serving %s %s to %s: %s", self.environ.get("REQUEST_METHOD"),
                     self.environ.get("PATH_INFO"), _peer(address), _why(exc) if exc else "?")
        log.debug("http: the error's traceback", exc_info=True)  # a bug of ours: the detail, when asked for
        if not self.headers_sent:
            self.result = self.error_output(self.environ, self.start_response)
            self.finish_response()

    def log_exception(self, exc_info) -> None:  # type: ignore[no-untyped-def]
        pass  # handle_error says it in one line


class _QuietHandler(WSGIRequestHandler):
    """Serves one request whose head the waiting room has read (``head``)."""

    timeout = READ_TIMEOUT_SECONDS

    def __init__(self, request: socket.socket, client_address: object, server: object, head: bytes = b""):
        self._head = head
        super().__init__(request, client_address, server)  # type: ignore[arg-type]

    def setup(self) -> None:
        self.connection = self.request
        self.connection.settimeout(self.timeout)
        self.rfile = io.BufferedReader(_HeadThenSocket(self._head, self.connection))
        self.wfile = _DeadlineWriter(self.connection, self.timeout)

    def handle(self) -> None:  # wsgiref's, with the quiet handler
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():  # an error code has been sent
            return
        # wsgiref only writes to and flushes its stdout; typeshed asks for a whole IO[bytes]
        handler = _ServerHandler(self.rfile, self.wfile, self.get_stderr(), self.get_environ(),  # type: ignore[arg-type]
                                 multithread=False)
        handler.request_handler = self  # type: ignore[attr-defined]
        handler.run(self.server.get_app())  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:  # scrapes every 15 s would flood the log
        pass


# --------------------------------------------------------------------------- the waiting room

_SNIFF, _HANDSHAKE, _HEAD = range(3)


class _Waiting:
    """A connection in the waiting room: where it is, what it has sent, its deadline."""

    __slots__ = ("sock", "address", "peer", "deadline", "tls", "web", "head", "stage", "events", "scanned",
                 "line_start")

    def __init__(self, sock: socket.socket, address: object, deadline: float, tls: ssl.SSLContext | None,
                 web: WebConfig | None):
        self.sock = sock
        self.address = address
        self.peer = _peer(address)
        self.deadline = deadline
        self.tls = tls
        self.web = web
        self.head = bytearray()
        self.stage = _SNIFF if tls is not None else _HEAD
        self.events = selectors.EVENT_READ
        self.scanned = 0  # how far the head has been looked through for line ends
        self.line_start = 0  # where its current (last, maybe unfinished) line starts


class _TooLarge(Exception):
    """A request head past a limit: ``answer`` is the refusal to send, ``what`` says which limit for the log."""

    def __init__(self, answer: bytes, what: str, limit: int):
        super().__init__(what)
        self.answer, self.what, self.limit = answer, what, limit


def _head_end(waiting: _Waiting) -> int:
    """Where the head ends (just past its blank line) in what ``waiting`` has sent; 0 while it goes on.

    Looks only at the bytes new since the last call, line by line, and raises :class:`_TooLarge` as soon as
    a line or the head is past its limit, whether or not the head is complete (a whole oversized head often
    comes in one read)."""
    head = waiting.head
    while (newline := head.find(b"\n", waiting.scanned)) >= 0:
        _check_line(newline + 1 - waiting.line_start, waiting.line_start)
        if newline + 1 > MAX_HEAD_BYTES:
            raise _TooLarge(HEAD_TOO_LARGE_ANSWER, "request head", MAX_HEAD_BYTES)
        blank = head[waiting.line_start:newline] in (b"", b"\r") and waiting.line_start > 0
        waiting.line_start = waiting.scanned = newline + 1
        if blank:
            return newline + 1
    waiting.scanned = len(head)
    _check_line(len(head) - waiting.line_start, waiting.line_start)  # an unfinished line is judged as it grows
    if len(head) > MAX_HEAD_BYTES:
        raise _TooLarge(HEAD_TOO_LARGE_ANSWER, "request head", MAX_HEAD_BYTES)
    return 0


def _check_line(length: int, start: int) -> None:
    """Raise :class:`_TooLarge` for a line of ``length`` bytes past :data:`MAX_LINE_BYTES` (the first line,
    at ``start`` 0, is the request line: 414; a header line: 431)."""
    if length > MAX_LINE_BYTES:
        if start == 0:
            raise _TooLarge(LINE_TOO_LONG_ANSWER, "request line", MAX_LINE_BYTES)
        raise _TooLarge(HEAD_TOO_LARGE_ANSWER, "header line", MAX_LINE_BYTES)


class _WaitingRoom(threading.Thread):
    """Holds accepted connections while they send their request head (and do their TLS handshake),
    non-blocking, on one thread with a selector; hands each complete head to the pool; closes those
    that take longer than the read timeout in all, or send too much.  See the module docstring."""

    def __init__(self, dispatch: Callable[[socket.socket, object, bytes, WebConfig | None], None],
                 timeout: float, refused: Callable[[str], None]):
        super().__init__(daemon=True, name="http-waiting")
        self._dispatch = dispatch
        self._refused = refused
        self.capacity = WAITING
        """Connections held at most (see :class:`ConnectionCap`)."""
        self.arriving = WAITING
        """Accepted connections not yet taken in at most (the accepting thread's side)."""
        self._timeout = timeout
        self._selector = selectors.DefaultSelector()
        self._arrivals: deque[tuple[socket.socket, object, ssl.SSLContext | None, WebConfig | None, float]] = deque()
        self._lock = threading.Lock()
        self._taken = threading.Condition(self._lock)
        """Notified when the room takes a connection in (room in the arrivals for the accepting thread)."""
        self._stopped = threading.Event()
        # In arrival order, so in deadline order (every connection gets the same time): the first is
        # the next to expire and the oldest to displace.
        self._waiting: dict[_Waiting, None] = {}
        self._by_peer: dict[str, dict[_Waiting, None]] = {}
        # The selector sleeps until a connection speaks, the nearest deadline passes, or this pair is
        # poked (a new connection, a stop): no polling while the agent is idle.
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._selector.register(self._wake_reader, selectors.EVENT_READ)

    # ---- the accepting thread's side

    def add(self, request: socket.socket, client_address: object, tls: ssl.SSLContext | None,
            web: WebConfig | None) -> bool:
        """Take ``request`` in (its TLS and web configuration as they are now); False when the
        room is stopped or the connections arriving faster than the room takes them are too many.

        While :attr:`arriving` connections wait to be taken in, the accepting thread waits (up to
        :data:`ARRIVAL_WAIT_SECONDS`) for the room to take one: the connections behind it stay in the
        kernel's backlog, holding no descriptor, and a probe among them is then taken in (displacing a
        flood's connection) rather than refused."""
        with self._taken:
            if len(self._arrivals) >= self.arriving:
                self._poke()
                self._taken.wait_for(lambda: self._stopped.is_set() or len(self._arrivals) < self.arriving,
                                     ARRIVAL_WAIT_SECONDS)
            if self._stopped.is_set() or len(self._arrivals) >= self.arriving:
                return False
            self._arrivals.append((request, client_address, tls, web, time.monotonic() + self._timeout))
        self._poke()
        return True

    def _poke(self) -> None:
        try:
            self._wake_writer.send(b"\0")
        except OSError:  # the pair's buffer is full (the selector wakes anyway) or already closed
            pass

    # ---- the room's thread

    def run(self) -> None:
        try:
            while not self._stopped.is_set():
                self._admit()
                first = next(iter(self._waiting), None)
                timeout = None if first is None else max(0.0, first.deadline - time.monotonic())
                try:
                    events = self._selector.select(timeout=timeout)
                except (OSError, ValueError):  # a socket closed under us by stop(); the loop ends
                    continue
                for key, _ in events:
                    if key.data is None:
                        self._drain_wake()
                    elif key.data in self._waiting:
                        self._advance(key.data)
                self._expire()
        finally:
            self._close_all()

    def _drain_wake(self) -> None:
        try:
            while self._wake_reader.recv(4096):
                pass
        except OSError:  # drained (BlockingIOError)
            pass

    def _admit(self) -> None:
        while True:
            with self._taken:
                if not self._arrivals:
                    return
                request, address, tls, web, deadline = self._arrivals.popleft()
                self._taken.notify()
            waiting = _Waiting(request, address, deadline, tls, web)
            if len(self._waiting) >= self.capacity:
                self._displace()
            try:
                request.setblocking(False)
                self._selector.register(request, selectors.EVENT_READ, waiting)
            except (OSError, ValueError):
                _close(request)
                continue
            self._waiting[waiting] = None
            self._by_peer.setdefault(waiting.peer, {})[waiting] = None

    def _displace(self) -> None:
        """Room for one more: close the oldest connection of the address that holds the most."""
        peer, held = max(self._by_peer.items(), key=lambda item: len(item[1]))
        victim = next(iter(held))
        self._drop(victim)
        self._refused(f"connections still sending their request ({self.capacity}); the oldest of the address "
                      f"holding the most ({peer}, {len(held) + 1}) is closed for each new one")

    def _expire(self) -> None:
        now = time.monotonic()
        while self._waiting:
            first = next(iter(self._waiting))
            if first.deadline > now:
                return
            stage = {_SNIFF: "sent nothing", _HANDSHAKE: "did not finish its TLS handshake",
                     _HEAD: "did not finish its request head"}[first.stage]
            _events.note("slow", logging.INFO, "http: closed a connection from %s that %s within %g s", first.peer,
                         stage, self._timeout)
            self._drop(first)

    def _drop(self, waiting: _Waiting) -> None:
        self._forget(waiting)
        _close(waiting.sock)

    def _forget(self, waiting: _Waiting) -> None:
        self._waiting.pop(waiting, None)
        same = self._by_peer.get(waiting.peer)
        if same is not None:
            same.pop(waiting, None)
            if not same:
                del self._by_peer[waiting.peer]
        try:
            self._selector.unregister(waiting.sock)
        except (KeyError, ValueError, OSError):
            pass

    def _want(self, waiting: _Waiting, events: int) -> None:
        if waiting.events != events:
            waiting.events = events
            self._selector.modify(waiting.sock, events, waiting)

    def _advance(self, waiting: _Waiting) -> None:
        """Take the connection as far as it goes without waiting: sniff, handshake, head."""
        if waiting.stage == _SNIFF and not self._sniff(waiting):
            return
        if waiting.stage == _HANDSHAKE and not self._handshake(waiting):
            return
        self._read_head(waiting)

    def _sniff(self, waiting: _Waiting) -> bool:
        """TLS or not, from the first byte (peeked): True once wrapped for the handshake."""
        try:
            first = waiting.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        except OSError:
            first = b""
        if not first:  # closed before a byte: a port check, a load balancer's probe
            self._drop(waiting)
            return False
        if first[0] != _TLS_HANDSHAKE:  # plain HTTP (or anything else) on the TLS port: say so, as Go's servers do
            log.debug("http: %s sent plain HTTP to the TLS port", waiting.peer)
            self._answer(waiting, PLAIN_HTTP_ANSWER)
            return False
        assert waiting.tls is not None
        self._selector.unregister(waiting.sock)  # wrapping detaches the socket: its file number moves
        try:
            waiting.sock = waiting.tls.wrap_socket(waiting.sock, server_side=True, do_handshake_on_connect=False)
            self._selector.register(waiting.sock, selectors.EVENT_READ, waiting)
        except (OSError, ValueError) as exc:
            _events.note("tls", logging.INFO, "http: TLS with %s failed: %s", waiting.peer, _why(exc))
            self._forget(waiting)
            _close(waiting.sock)
            return False
        waiting.events = selectors.EVENT_READ
        waiting.stage = _HANDSHAKE
        return True

    def _handshake(self, waiting: _Waiting) -> bool:
        sock = waiting.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
            if waiting.web is not None and not waiting.web.allowed_peer(sock.getpeercert()):
                raise ssl.SSLError("client certificate has no SAN in client_allowed_sans")
        except ssl.SSLWantReadError:
            self._want(waiting, selectors.EVENT_READ)
            return False
        except ssl.SSLWantWriteError:
            self._want(waiting, selectors.EVENT_WRITE)
            return False
        except (OSError, ValueError) as exc:  # SSLError, resets
            _events.note("tls", logging.INFO, "http: TLS handshake with %s failed: %s", waiting.peer, _why(exc))
            self._drop(waiting)
            return False
        waiting.stage = _HEAD
        self._want(waiting, selectors.EVENT_READ)
        return True

    def _read_head(self, waiting: _Waiting) -> None:
        sock = waiting.sock
        while True:
            try:
                data = sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                self._want(waiting, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                self._want(waiting, selectors.EVENT_WRITE)
                return
            except (OSError, ValueError) as exc:
                _events.note("hangup", logging.INFO, "http: %s hung up or stalled mid-request: %s", waiting.peer,
                             _why(exc))
                self._drop(waiting)
                return
            if not data:  # closed before finishing its request: nothing to answer
                self._drop(waiting)
                return
            waiting.head += data
            try:
                end = _head_end(waiting)
            except _TooLarge as refusal:
                _events.note("large", logging.INFO, "http: %s sent a %s over %d bytes: answered %s", waiting.peer,
                             refusal.what, refusal.limit, refusal.answer.split(b" ", 2)[1].decode())
                self._answer(waiting, refusal.answer, drain=True)
                return
            if end:
                self._forget(waiting)
                try:
                    sock.setblocking(True)
                except OSError:
                    _close(sock)
                    return
                self._dispatch(sock, waiting.address, bytes(waiting.head), waiting.web)
                return
            if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                return  # the selector says when more comes (TLS: bytes it already decrypted would not wake it)

    def _answer(self, waiting: _Waiting, answer: bytes, *, drain: bool = False) -> None:
        """A short refusal, written if the socket takes it now, and the connection closed; with ``drain``,
        what the client has already sent (up to :data:`REFUSED_DRAIN_BYTES`, without waiting) is read first,
        so that the close does not reset the connection under the answer."""
        self._forget(waiting)
        try:
            waiting.sock.send(answer)
            waiting.sock.shutdown(socket.SHUT_WR)
            drained = 0
            while drain and drained < REFUSED_DRAIN_BYTES:
                data = waiting.sock.recv(65536)
                if not data:
                    break
                drained += len(data)
        except (OSError, ValueError):  # nothing more there now (BlockingIOError, SSLWantReadError), or gone
            pass
        _close(waiting.sock)

    def _close_all(self) -> None:
        for waiting in list(self._waiting):
            self._drop(waiting)
        with self._lock:
            arrivals, self._arrivals = list(self._arrivals), deque()
        for request, *_ in arrivals:
            _close(request)
        self._selector.close()
        self._wake_reader.close()
        self._wake_writer.close()

    def stop(self) -> None:
        self._stopped.set()
        with self._taken:
            self._taken.notify_all()  # an accepting thread waiting for room gives up
        if self.ident is None:  # never started (the bind failed): nothing else will close these
            self._close_all()
            return
        self._poke()
        self.join(5)


def _close(request: socket.socket) -> None:
    try:
        request.close()
    except OSError:
        pass


class _PooledServer(WSGIServer):
    """A WSGI server whose connections wait in a waiting room until their request head is in, and
    whose requests then run on a bounded thread pool (see the module docstring)."""

    request_queue_size = BACKLOG

    tls: ssl.SSLContext | None = None
    web: WebConfig | None = None
    read_timeout: float = READ_TIMEOUT_SECONDS

    def __init__(self, *args: object, **kwargs: object):
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="http")
        self._slots = threading.BoundedSemaphore(WORKERS + QUEUED)
        self._pooled = WORKERS + QUEUED
        self.rejected = 0
        # before binding: a failed bind closes it
        self._room = _WaitingRoom(self._to_pool, self.read_timeout, self._count_refusal)
        # The accept loop sleeps in select until a connection arrives or this pair is poked (a stop)
        self._stop_reader, self._stop_writer = socket.socketpair()
        self._stop_requested = threading.Event()
        self._serving_ended = threading.Event()
        self._serving_ended.set()  # nothing to wait for until serve_forever runs
        try:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # binds: may raise (address in use)
        except BaseException:
            self._stop_reader.close()
            self._stop_writer.close()
            raise
        self._room.start()

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Accept connections until :meth:`shutdown`, asleep in ``select`` in between.  socketserver's own loop
        wakes every ``poll_interval`` to look for a stop: every stop of the agent (and of each test's server)
        waited up to half a second for it, and an idle agent woke twice a second for nothing."""
        self._serving_ended.clear()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self, selectors.EVENT_READ)
                selector.register(self._stop_reader, selectors.EVENT_READ)
                while not self._stop_requested.is_set():
                    ready = selector.select()
                    if self._stop_requested.is_set():
                        break
                    if any(key.fileobj is self for key, _ in ready):
                        self._handle_request_noblock()  # type: ignore[attr-defined]
                    self.service_actions()
        finally:
            self._serving_ended.set()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait until it has returned (at once: the stop wakes its ``select``)."""
        self._stop_requested.set()
        try:
            self._stop_writer.send(b"\0")
        except OSError:  # closed already: the loop has ended
            pass
        self._serving_ended.wait()

    def apply(self, cap: ConnectionCap) -> None:
        """Hold at most ``cap``'s connections (before the first is accepted)."""
        self._room.capacity, self._room.arriving = cap.waiting, cap.arriving
        self._slots = threading.BoundedSemaphore(cap.pool)
        self._pooled = cap.pool

    def get_request(self) -> tuple[socket.socket, object]:
        try:
            return super().get_request()  # type: ignore[return-value]
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):  # the listening socket stays readable: do not spin
                _events.note("files", logging.WARNING, "http: cannot accept a connection: %s (something else "
                             "holds the descriptors the connection cap leaves)", _why(exc))
                time.sleep(0.05)
            raise

    # a TCP server's requests are sockets; typeshed's BaseServer also allows a UDP server's (bytes, socket)
    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        # one configuration per connection, whatever a reload does meanwhile
        if not self._room.add(request, client_address, self.tls, self.web):
            self._count_refusal(f"connections arriving faster than they are taken in ({self._room.arriving})")
            self.shutdown_request(request)

    def _count_refusal(self, why: str) -> None:
        self.rejected += 1
        _events.note("full", logging.WARNING, "http: %d connection(s) refused in all: too many %s", self.rejected,
                     why)

    def _to_pool(self, request: socket.socket, client_address: object, head: bytes, web: WebConfig | None) -> None:
        """A connection whose request head is in: to a pool thread, or closed if the pool is full."""
        if not self._slots.acquire(blocking=False):
            self._count_refusal(f"requests in progress or queued ({self._pooled})")
            self.shutdown_request(request)
            return
        self._pool.submit(self._handle, request, client_address, head)

    def _handle(self, request: socket.socket, client_address: object, head: bytes) -> None:
        try:
            self.RequestHandlerClass(request, client_address, self, head)  # type: ignore[call-arg, arg-type]
        except Exception as exc:
            self.handle_error(request, client_address, exc)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request: object, client_address: object,  # type: ignore[override]
                     exc: BaseException | None = None) -> None:
        exc = exc or sys.exc_info()[1]
        _events.note("hangup", logging.INFO, "http: %s hung up or stalled mid-request: %s", _peer(client_address),
                     _why(exc) if exc else "?")

    def server_close(self) -> None:
        self._room.stop()
        super().server_close()
        self._stop_reader.close()
        self._stop_writer.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


class _PooledServer6(_PooledServer):
    address_family = socket.AF_INET6


def _accepts_gzip(environ: dict) -> bool:
    return any(part.split(";")[0].strip() == "gzip"
               for part in environ.get("HTTP_ACCEPT_ENCODING", "").split(","))


def make_app(metrics: MetricsSource, healthy: Callable[[], tuple[bool, str]],
             alive: Callable[[], tuple[bool, str]] | None = None):
    """``/healthz``: whether the agent works (``healthy``: its scheduler runs and its suites can run);
    ``/livez``: only whether the process should be restarted (``alive``: its scheduler runs).  A full
    state folder fails the first and not the second: a restart would not give the disk space back, and
    a Kubernetes liveness probe on it would leave the pod in CrashLoopBackOff, its metrics and the alert
    that explains it gone."""
    alive = alive or healthy

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            if _accepts_gzip(environ):
                data = metrics.gzipped()
                headers = [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Encoding", "gzip")]
            else:
                data = metrics.body()
                headers = [("Content-Type", CONTENT_TYPE_LATEST)]
            start_response("200 OK", headers + [("Content-Length", str(len(data)))])
            return [data]
        if path in ("/healthz", "/health", "/livez"):
            ok, message = (alive if path == "/livez" else healthy)()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [(message + "\n").encode()]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"sixdim agent: /metrics for Prometheus, /healthz for health (readiness), /livez for liveness\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


def protect(app: Callable, current: Callable[[], WebConfig | None]) -> Callable:
    """The app behind basic auth (all paths but :data:`OPEN_PATHS`) and with the configured
    response headers on every answer, as the web configuration ``current()`` says at each request
    (a reload replaces it; None: neither)."""
    challenge = [("WWW-Authenticate", f'Basic realm="{REALM}"'), ("Content-Type", "text/plain")]
    busy = [("Retry-After", "1"), ("Content-Type", "text/plain")]

    def protected(environ: dict, start_response: Callable) -> Iterable[bytes]:
        web = current()
        if web is None:
            return app(environ, start_response)
        extra = list(web.headers)

        def respond(status: str, headers: list, exc_info: object = None) -> Callable:
            return start_response(status, list(headers) + extra, exc_info)

        if web.auth is not None and environ.get("PATH_INFO", "/") not in OPEN_PATHS:
            verdict = web.auth.verify(environ.get("HTTP_AUTHORIZATION"), environ.get("REMOTE_ADDR", ""))
            if verdict == BUSY:  # not judged: a wrong-password flood is keeping bcrypt busy
                respond("429 Too Many Requests", busy)
                return [b"429 Too Many Requests: too many password checks at once, retry in a second\n"]
            if verdict != OK:
                respond("401 Unauthorized", challenge)
                return [b"401 Unauthorized: basic auth required\n"]
        return app(environ, respond)

    return protected


class HttpServer:
    """Serves the app on a background thread until :meth:`shutdown`; with ``web`` (a loaded web
    configuration file), over TLS and/or behind basic auth as it says.  :meth:`set_web` replaces
    the web configuration (SIGHUP): connections accepted after it use the new one."""

    def __init__(self, host: str, port: int, app: Callable, *, read_timeout: float = READ_TIMEOUT_SECONDS,
                 web: WebConfig | None = None, open_files_limit: int | None = None, reserve: int = RESERVED_FILES):
        """``open_files_limit``: the process's soft RLIMIT_NOFILE, from which :attr:`cap` is computed with
        the descriptors open once the server has its own and ``reserve`` (None: the defaults, whatever the
        limit)."""
        pooled = _PooledServer6 if ":" in host else _PooledServer
        server_class = cast("type[_PooledServer]", type(pooled.__name__, (pooled,), {"read_timeout": read_timeout}))
        handler = type("_Handler", (_QuietHandler,), {"timeout": read_timeout})
        self._server = make_server(host, port, protect(app, lambda: self._server.web), server_class=server_class,
                                   handler_class=handler)
        self.port = self._server.server_port
        self.cap: ConnectionCap | None = None
        if open_files_limit is not None:  # before anything is accepted: the accepting thread starts below
            self.cap = connection_cap(open_files_limit, open_files(), reserve)
            self._server.apply(self.cap)  # type: ignore[attr-defined]
        self.set_web(web)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="http")
        self._thread.start()

    def set_web(self, web: WebConfig | None) -> None:
        """TLS, client certificates, basic auth and headers from now on as ``web`` says (None: plain
        HTTP, no auth).  The context and the configuration are swapped together, each a single
        attribute store, so a connection sees one configuration or the other."""
        self._server.tls = web.ssl_context if web is not None else None  # type: ignore[attr-defined]
        self._server.web = web  # type: ignore[attr-defined]
        self.scheme = "https" if web is not None and web.tls else "http"

    @property
    def rejected(self) -> int:
        """Connections closed unserved for want of room: displaced from a full waiting room, or refused
        because the pool and its queue were full."""
        return self._server.rejected  # type: ignore[attr-defined]

    def shutdown(self) -> None:
        self._server.shutdown()
        self._thread.join()  # the accept loop is out of its selector before the listening socket closes
        self._server.server_close()
