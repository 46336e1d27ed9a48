"""The HTTP endpoint: /metrics (Prometheus text format) and /healthz."""

from __future__ import annotations

import socket
import threading
from socketserver import ThreadingMixIn
from typing import Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # scrapes every 15 s would flood the log
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


def make_app(registry: CollectorRegistry, healthy: Callable[[], tuple[bool, str]]):
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics_app(environ, start_response)
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

    def __init__(self, host: str, port: int, app: Callable):
        server_class = _ThreadingServer6 if ":" in host else _ThreadingServer
        self._server = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="http")
        self._thread.start()

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
