"""The HTTP endpoint: /metrics (Prometheus text format) and /healthz.

A scrape is served from the exposition cache (:mod:`agent.exposition`): the bytes rendered in the
background, gzip-compressed when the scraper asks for it (Prometheus always does), so a scrape
costs a memory copy, whatever the history holds.

Connections are handled by a **bounded pool** of threads, not one thread per connection: at most
:data:`WORKERS` requests are served at once and :data:`QUEUED` more wait; a connection beyond
that is closed at once (and counted in the log), so a flood of connections cannot make the daemon
grow threads or memory.  Every connection has a **read timeout** (:data:`READ_TIMEOUT_SECONDS`),
so a client that opens a connection and sends nothing holds a pool thread only that long.
"""

from __future__ import annotations

import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger("sixdim")

WORKERS = 8
"""Requests served at once."""
QUEUED = 64
"""Accepted connections waiting for a worker; beyond this a new connection is closed at once."""
READ_TIMEOUT_SECONDS = 5.0
"""How long a connection may take to send its request (and to read the answer)."""


class MetricsSource(Protocol):
    """What /metrics serves: the exposition cache's interface."""

    def body(self) -> bytes: ...
    def gzipped(self) -> bytes: ...


class _QuietHandler(WSGIRequestHandler):
    timeout = READ_TIMEOUT_SECONDS  # StreamRequestHandler applies it to the connection's socket

    def log_message(self, format: str, *args: object) -> None:  # scrapes every 15 s would flood the log
        pass


class _PooledServer(WSGIServer):
    """A WSGI server whose requests run on a bounded thread pool (see the module docstring)."""

    request_queue_size = QUEUED  # the listen backlog

    def __init__(self, *args: object, **kwargs: object):
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="http")
        self._slots = threading.BoundedSemaphore(WORKERS + QUEUED)
        self.rejected = 0
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # binds: may raise (address in use)

    def process_request(self, request: socket.socket, client_address: object) -> None:
        if not self._slots.acquire(blocking=False):
            self.rejected += 1
            if self.rejected == 1 or self.rejected % 1000 == 0:
                log.warning("http: %d connection(s) refused: %d in progress or waiting", self.rejected,
                            WORKERS + QUEUED)
            self.shutdown_request(request)
            return
        self._pool.submit(self._handle, request, client_address)

    def _handle(self, request: socket.socket, client_address: object) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request: object, client_address: object) -> None:
        log.debug("http: error serving %s", client_address, exc_info=True)  # timeouts, resets: not news

    def server_close(self) -> None:
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


class HttpServer:
    """Serves the app on a background thread until :meth:`shutdown`."""

    def __init__(self, host: str, port: int, app: Callable, *, read_timeout: float = READ_TIMEOUT_SECONDS):
        server_class = _PooledServer6 if ":" in host else _PooledServer
        handler = type("_Handler", (_QuietHandler,), {"timeout": read_timeout})
        self._server = make_server(host, port, app, server_class=server_class, handler_class=handler)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="http")
        self._thread.start()

    @property
    def rejected(self) -> int:
        """Connections closed at once because the pool and its queue were full."""
        return self._server.rejected  # type: ignore[attr-defined]

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
