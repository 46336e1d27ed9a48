"""The HTTP endpoint: /metrics (Prometheus text format) and /healthz.

A scrape is served from the exposition cache (:mod:`sixdim.http.exposition`): the bytes rendered in the
background, gzip-compressed when the scraper asks for it (Prometheus always does), so a scrape
costs a memory copy, whatever the history holds.

Connections are handled by a **bounded pool** of threads, not one thread per connection: at most
:data:`WORKERS` requests are served at once and :data:`QUEUED` more wait; a connection beyond
that is closed at once (and counted in the log), so a flood of connections cannot make the daemon
grow threads or memory.  A connection reaches the pool only once it has sent something: until
then it waits in a **waiting room** (:class:`_WaitingRoom`: one thread and a selector, at most
:data:`WAITING` connections), and one that sends nothing within the **read timeout**
(:data:`READ_TIMEOUT_SECONDS`) is closed there.  So idle or half-open connections hold no pool
thread at all, and ``/healthz`` and scrapes go on answering through a flood of them; a client
that sends its request slowly holds a pool thread for at most the read timeout per read.

With a web configuration file (:mod:`sixdim.http.webconfig`), the endpoint serves **TLS** and/or asks
for **basic auth**.  The TLS handshake happens on the pool thread, under the same read timeout, so
a slow or silent handshake holds one worker that long and never the accepting thread.  A client
that speaks plain HTTP to the TLS port gets ``400 Client sent an HTTP request to an HTTPS server``
(as Go's servers answer) and the connection is closed; one whose certificate is missing, not signed
by the client CA or without an allowed SAN is dropped at the handshake.  Basic auth guards every
path except ``/healthz`` and ``/health``: liveness probes (the kubelet's, systemd's) carry no
credentials, and the answer tells nothing but "the scheduler runs".  The configured security
headers go on every response, 401s and 404s included.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sixdim.http.webconfig import REALM

if TYPE_CHECKING:
    from sixdim.http.webconfig import WebConfig

log = logging.getLogger("sixdim")

WORKERS = 8
"""Requests served at once."""
QUEUED = 64
"""Accepted connections waiting for a worker; beyond this a new connection is closed at once."""
WAITING = 512
"""Accepted connections that have not sent anything yet, held without a thread; beyond this a new
connection is closed at once (the process's file descriptors are the limit this protects)."""
READ_TIMEOUT_SECONDS = 5.0
"""How long a connection may take to send its request (and to read the answer); with TLS, the
handshake gets as long again."""
OPEN_PATHS = ("/healthz", "/health")
"""Paths served without basic auth: liveness probes carry no credentials."""
PLAIN_HTTP_ANSWER = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
                     b"Client sent an HTTP request to an HTTPS server.\n")
_TLS_HANDSHAKE = 0x16
"""The first byte of every TLS connection (a handshake record); anything else is not TLS."""


class MetricsSource(Protocol):
    """What /metrics serves: the exposition cache's interface."""

    def body(self) -> bytes: ...
    def gzipped(self) -> bytes: ...


class _QuietHandler(WSGIRequestHandler):
    timeout = READ_TIMEOUT_SECONDS  # StreamRequestHandler applies it to the connection's socket

    def log_message(self, format: str, *args: object) -> None:  # scrapes every 15 s would flood the log
        pass


class _WaitingRoom(threading.Thread):
    """Holds accepted connections until they send their first bytes, then hands them to the pool;
    closes those that send nothing within the read timeout.  One thread, one selector."""

    def __init__(self, dispatch: Callable[[socket.socket, object], None], timeout: float):
        super().__init__(daemon=True, name="http-waiting")
        self._dispatch = dispatch
        self._timeout = timeout
        self._selector = selectors.DefaultSelector()
        self._deadlines: dict[socket.socket, tuple[float, object]] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        # The selector sleeps until a connection speaks, the nearest deadline passes, or this pair is
        # poked (a new connection, a stop): no polling while the agent is idle.
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._selector.register(self._wake_reader, selectors.EVENT_READ)

    def add(self, request: socket.socket, client_address: object) -> bool:
        """Wait for ``request`` to send something; False (not taken) when the room is full."""
        with self._lock:
            if len(self._deadlines) >= WAITING or self._stopped.is_set():
                return False
            self._deadlines[request] = (time.monotonic() + self._timeout, client_address)
            self._selector.register(request, selectors.EVENT_READ)
        self._poke()  # its deadline may be nearer than the one the selector sleeps towards
        return True

    def _poke(self) -> None:
        try:
            self._wake_writer.send(b"\0")
        except OSError:  # the pair's buffer is full (the selector wakes anyway) or already closed
            pass

    def _take(self, request: socket.socket) -> object | None:
        with self._lock:
            entry = self._deadlines.pop(request, None)
            if entry is not None:
                self._selector.unregister(request)
        return None if entry is None else entry[1]

    def _sleep(self) -> float | None:
        """Seconds until the nearest deadline; None (until poked or spoken to) when nobody waits."""
        with self._lock:
            nearest = min((deadline for deadline, _ in self._deadlines.values()), default=None)
        return None if nearest is None else max(0.0, nearest - time.monotonic())

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                events = self._selector.select(timeout=self._sleep())
            except (OSError, ValueError):  # a socket closed under us by stop(); the loop ends
                continue
            for key, _ in events:
                if key.fileobj is self._wake_reader:
                    try:
                        while self._wake_reader.recv(4096):
                            pass
                    except OSError:  # drained (BlockingIOError)
                        pass
                    continue
                address = self._take(key.fileobj)  # type: ignore[arg-type]
                if address is not None:
                    self._dispatch(key.fileobj, address)  # type: ignore[arg-type]
            now = time.monotonic()
            with self._lock:
                expired = [r for r, (deadline, _) in self._deadlines.items() if deadline <= now]
            for request in expired:
                if self._take(request) is not None:
                    _close(request)
        self._selector.close()
        self._wake_reader.close()
        self._wake_writer.close()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            waiting, self._deadlines = list(self._deadlines), {}
            for request in waiting:
                self._selector.unregister(request)
        for request in waiting:
            _close(request)
        if self.ident is None:  # never started (the bind failed): nothing else will close these
            self._selector.close()
            self._wake_reader.close()
            self._wake_writer.close()
        else:
            self._poke()


def _close(request: socket.socket) -> None:
    try:
        request.close()
    except OSError:
        pass


class _PooledServer(WSGIServer):
    """A WSGI server whose requests run on a bounded thread pool (see the module docstring)."""

    request_queue_size = QUEUED  # the listen backlog

    tls: ssl.SSLContext | None = None
    web: WebConfig | None = None
    read_timeout: float = READ_TIMEOUT_SECONDS

    def __init__(self, *args: object, **kwargs: object):
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="http")
        self._slots = threading.BoundedSemaphore(WORKERS + QUEUED)
        self.rejected = 0
        self._room = _WaitingRoom(self._to_pool, self.read_timeout)  # before binding: a failed bind closes it
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # binds: may raise (address in use)
        self._room.start()

    def process_request(self, request: socket.socket, client_address: object) -> None:
        if not self._room.add(request, client_address):
            self._refuse(request, "waiting to send their request")

    def _refuse(self, request: socket.socket, where: str) -> None:
        self.rejected += 1
        if self.rejected == 1 or self.rejected % 1000 == 0:
            log.warning("http: %d connection(s) refused: too many %s", self.rejected, where)
        self.shutdown_request(request)

    def _to_pool(self, request: socket.socket, client_address: object) -> None:
        """A connection that has sent something: to a pool thread, or closed if the pool is full."""
        if not self._slots.acquire(blocking=False):
            self._refuse(request, f"requests in progress or queued ({WORKERS + QUEUED})")
            return
        self._pool.submit(self._handle, request, client_address)

    def _handle(self, request: socket.socket, client_address: object) -> None:
        tls, web = self.tls, self.web  # one configuration per connection, whatever a reload does meanwhile
        try:
            if tls is not None:
                request = self._handshake(request, client_address, tls, web)
            if request is not None:
                self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            if request is not None:
                self.shutdown_request(request)
            self._slots.release()

    def _handshake(self, request: socket.socket, client_address: object, tls: ssl.SSLContext,
                   web: WebConfig | None) -> ssl.SSLSocket | None:
        """TLS on an accepted connection, on this pool thread: the socket wrapped, or None when the
        connection was refused (and closed): not TLS, a failed handshake, a SAN not allowed."""
        request.settimeout(self.read_timeout)
        try:
            first = request.recv(1, socket.MSG_PEEK)
        except OSError:
            first = b""
        if not first or first[0] != _TLS_HANDSHAKE:
            if first:  # plain HTTP (or anything else) on the TLS port: say so, as Go's servers do
                log.debug("http: %s sent plain HTTP to the TLS port", client_address)
                try:
                    request.sendall(PLAIN_HTTP_ANSWER)
                except OSError:
                    pass
            self.shutdown_request(request)
            return None
        connection = tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        try:
            connection.do_handshake()  # the read timeout bounds it
            if web is not None and not web.allowed_peer(connection.getpeercert()):
                log.debug("http: %s: client certificate has no SAN in client_allowed_sans", client_address)
                raise ssl.SSLError("client certificate SAN not allowed")
        except (OSError, ValueError) as exc:  # SSLError, timeouts, resets
            log.debug("http: TLS handshake with %s failed: %s", client_address, exc)
            self.shutdown_request(connection)
            return None
        return connection

    def handle_error(self, request: object, client_address: object) -> None:
        log.debug("http: error serving %s", client_address, exc_info=True)  # timeouts, resets: not news

    def server_close(self) -> None:
        self._room.stop()
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


class _PooledServer6(_PooledServer):
    address_family = socket.AF_INET6


def _accepts_gzip(environ: dict) -> bool:
    return any(part.split(";")[0].strip() == "gzip"
               for part in environ.get("HTTP_ACCEPT_ENCODING", "").split(","))


def make_app(metrics: MetricsSource, healthy: Callable[[], tuple[bool, str]]):
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
        if path in ("/healthz", "/health"):
            ok, message = healthy()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [(message + "\n").encode()]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"sixdim agent: /metrics for Prometheus, /healthz for liveness\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


def protect(app: Callable, current: Callable[[], WebConfig | None]) -> Callable:
    """The app behind basic auth (all paths but :data:`OPEN_PATHS`) and with the configured
    response headers on every answer, as the web configuration ``current()`` says at each request
    (a reload replaces it; None: neither)."""
    challenge = [("WWW-Authenticate", f'Basic realm="{REALM}"'), ("Content-Type", "text/plain")]

    def protected(environ: dict, start_response: Callable) -> Iterable[bytes]:
        web = current()
        if web is None:
            return app(environ, start_response)
        extra = list(web.headers)

        def respond(status: str, headers: list, exc_info: object = None) -> Callable:
            return start_response(status, list(headers) + extra, exc_info)

        if (web.auth is not None and environ.get("PATH_INFO", "/") not in OPEN_PATHS
                and not web.auth.check_header(environ.get("HTTP_AUTHORIZATION"))):
            respond("401 Unauthorized", challenge)
            return [b"401 Unauthorized: basic auth required\n"]
        return app(environ, respond)

    return protected


class HttpServer:
    """Serves the app on a background thread until :meth:`shutdown`; with ``web`` (a loaded web
    configuration file), over TLS and/or behind basic auth as it says.  :meth:`set_web` replaces
    the web configuration (SIGHUP): connections accepted after it use the new one."""

    def __init__(self, host: str, port: int, app: Callable, *, read_timeout: float = READ_TIMEOUT_SECONDS,
                 web: WebConfig | None = None):
        server_class = _PooledServer6 if ":" in host else _PooledServer
        server_class = type(server_class.__name__, (server_class,), {"read_timeout": read_timeout})
        handler = type("_Handler", (_QuietHandler,), {"timeout": read_timeout})
        self._server = make_server(host, port, protect(app, lambda: self._server.web), server_class=server_class,
                                   handler_class=handler)
        self.port = self._server.server_port
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
        """Connections closed at once because the pool and its queue were full."""
        return self._server.rejected  # type: ignore[attr-defined]

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
