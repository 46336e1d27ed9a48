"""The HTTP endpoint under abuse: idle connections cannot multiply threads, and scrapes resume."""

import gzip
import socket
import threading
import time
import urllib.request

import pytest

from sixdim.http import server as http
from sixdim.http.server import HttpServer, make_app

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


def voluntary_switches(thread: threading.Thread) -> int:
    """How often ``thread`` has given up its CPU to wait (Linux counts each wake from a blocking call)."""
    with open(f"/proc/self/task/{thread.native_id}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt_switches:"))


def test_the_accept_loop_sleeps_until_a_connection_or_its_stop():
    """socketserver's loop woke every half second to look for a stop: an idle agent woke twice a second for
    nothing, and every stop waited for the next wake.  The loop now sleeps until a connection or the stop
    itself wakes it: idle, its thread does not run at all; a scrape and the stop each wake it."""
    server = HttpServer("127.0.0.1", 0, make_app(Source(), lambda: (True, "ok")))
    accepting = server._thread
    try:
        assert get(server.port)[0] == 200
        time.sleep(0.2)  # back in its select
        idle = voluntary_switches(accepting)
        time.sleep(1.2)  # the old loop woke twice in this
        assert voluntary_switches(accepting) == idle
        assert get(server.port)[0] == 200  # a connection wakes it
    finally:
        server.shutdown()
    assert not accepting.is_alive()  # the stop woke it and it returned


@pytest.mark.slow
def test_idle_connections_neither_multiply_threads_nor_delay_scrapes():
    """300 connections that send nothing wait in the waiting room, not on pool threads: the thread
    count stays put, and /healthz and /metrics answer while all of them are still open."""
    server = HttpServer("127.0.0.1", 0, make_app(Source(), lambda: (True, "ok")), read_timeout=30.0)
    before = threading.active_count()
    idle = []
    try:
        for _ in range(300):  # open, send nothing: each would have held a thread forever once
            idle.append(socket.create_connection(("127.0.0.1", server.port)))
        time.sleep(0.5)
        assert threading.active_count() - before <= http.WORKERS + 2  # the pool and the waiting room
        assert get(server.port, "/healthz")[:2] == (200, b"ok\n")
        assert get(server.port)[:2] == (200, TEXT)
        assert server.rejected == 0
        for connection in idle[:3]:  # they are still open: they were never refused nor timed out
            connection.setblocking(False)
            try:
                assert connection.recv(1, socket.MSG_PEEK) != b"", "an idle connection was closed"
            except BlockingIOError:
                pass
    finally:
        for connection in idle:
            connection.close()
        server.shutdown()


@pytest.mark.slow
def test_a_silent_connection_is_closed_at_the_read_timeout_and_a_full_waiting_room_refuses(monkeypatch):
    monkeypatch.setattr(http, "WAITING", 20)
    # 3 s: the 30 connections are all made (and 10 refused) long before the first one times out,
    # even on a busy machine
    server = HttpServer("127.0.0.1", 0, make_app(Source(), lambda: (True, "ok")), read_timeout=3.0)
    idle = []
    try:
        for _ in range(30):
            idle.append(socket.create_connection(("127.0.0.1", server.port)))
        deadline = time.monotonic() + 10
        while server.rejected < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.rejected == 10  # the 10 beyond the room, closed at once
        idle[0].settimeout(20)
        assert idle[0].recv(1) == b""  # closed by the server once its read timeout passed
        assert get(server.port, "/healthz")[0] == 200  # and the room has space again
    finally:
        for connection in idle:
            connection.close()
        server.shutdown()
