"""The HTTP endpoint under abuse: idle connections cannot multiply threads, and scrapes resume."""

import gzip
import socket
import threading
import time
import urllib.request

from agent import http
from agent.http import HttpServer, make_app


TEXT = b"# HELP x test\n# TYPE x gauge\nx 1.0\n"


class Source:
    def body(self):
        return TEXT

    def gzipped(self):
        return gzip.compress(TEXT)


def get(port: int, path: str = "/metrics", gzip_ok: bool = False) -> tuple[int, bytes, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read(), dict(response.headers)


def test_metrics_plain_and_gzip():
    server = HttpServer("127.0.0.1", 0, make_app(Source(), lambda: (True, "ok")))
    try:
        status, body, headers = get(server.port)
        assert status == 200 and body == TEXT and "Content-Encoding" not in headers
        status, body, headers = get(server.port, gzip_ok=True)
        assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == TEXT
        assert get(server.port, "/healthz")[1] == b"ok\n"
    finally:
        server.shutdown()


def test_idle_connections_neither_multiply_threads_nor_block_scrapes_for_long():
    server = HttpServer("127.0.0.1", 0, make_app(Source(), lambda: (True, "ok")), read_timeout=1.0)
    before = threading.active_count()
    idle = []
    try:
        for _ in range(300):  # open, send nothing: each would have held a thread forever before
            idle.append(socket.create_connection(("127.0.0.1", server.port)))
        time.sleep(0.5)
        assert threading.active_count() - before <= http.WORKERS + 1
        assert server.rejected >= 100  # beyond the pool and its queue: closed at once, not given a thread
        deadline = time.monotonic() + 15
        while True:  # the idle ones time out after 1 s each, 8 at a time
            try:
                assert get(server.port)[0] == 200
                break
            except OSError:
                assert time.monotonic() < deadline, "scrapes did not resume after the idle connections timed out"
                time.sleep(0.2)
    finally:
        for connection in idle:
            connection.close()
        server.shutdown()
