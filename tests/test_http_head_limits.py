"""The request-head limits hold for complete heads too (issue 44, item 9).

The waiting room used to check the head's size only while the head was incomplete: a head whose blank line
came in the same read as its 64,000-byte header line (or its 40 KB request line) went to the pool and was
answered 200.  Now, however the bytes arrive, a request line over ``MAX_LINE_BYTES`` is answered 414, a
header line over it or a head over ``MAX_HEAD_BYTES`` 431, and the connection is closed before any of it is
parsed.  A real server (``HttpServer``), real sockets; each client sends its whole request, then reads."""

from __future__ import annotations

import gzip
import select
import socket
import ssl
import time

import pytest

from sixdim.http import server as http
from sixdim.http.server import HttpServer, make_app

TEXT = b"# HELP x test\n# TYPE x gauge\nx 1.0\n"


class Source:
    def body(self) -> bytes:
        return TEXT

    def gzipped(self) -> bytes:
        return gzip.compress(TEXT)


@pytest.fixture(scope="module")
def port():  # one server for the module: each test opens its own connections
    server = HttpServer("127.0.0.1", 0, make_app(Source(), lambda: (True, "ok")))
    yield server.port
    server.shutdown()


def exchange(port: int, request: bytes, *, then_wait: float = 0.0) -> bytes:
    """Send ``request`` (all of it, unless the server closes first), wait ``then_wait``, read the answer to EOF."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        try:
            client.sendall(request)
        except OSError:
            pass  # refused while we were still sending: the answer, if any, is read below
        time.sleep(then_wait)
        answer = b""
        try:
            while chunk := client.recv(65536):
                answer += chunk
        except OSError:
            pass
        return answer


def status(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/"), answer[:100]
    return int(answer.split(b" ", 2)[1])


def head(request_line: bytes, *headers: bytes) -> bytes:
    return request_line + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n"


def test_a_complete_head_with_a_64000_byte_header_line_is_431(port):
    answer = exchange(port, head(b"GET /metrics HTTP/1.1", b"Host: x", b"X-Big: " + b"a" * 64_000))
    assert status(answer) == 431, answer[:200]
    assert status(exchange(port, head(b"GET /metrics HTTP/1.1", b"Host: x"))) == 200  # and it still serves


def test_a_complete_40_kb_request_line_is_414(port):
    answer = exchange(port, head(b"GET /metrics?q=" + b"a" * 40_000 + b" HTTP/1.1", b"Host: x"))
    assert status(answer) == 414, answer[:200]


def test_a_complete_head_over_32_kib_in_short_lines_is_431(port):
    lines = [b"X-H-%03d: %s" % (n, b"b" * 1000) for n in range(40)]  # 40 lines of 1 KB: 40 KB in all
    answer = exchange(port, head(b"GET /metrics HTTP/1.1", b"Host: x", *lines))
    assert status(answer) == 431, answer[:200]


def test_a_header_line_just_over_the_line_limit_is_431_and_one_at_it_is_served(port):
    name = b"X-Long: "
    at_limit = name + b"c" * (http.MAX_LINE_BYTES - len(name) - 2)  # with its CRLF: exactly MAX_LINE_BYTES
    assert status(exchange(port, head(b"GET /metrics HTTP/1.1", b"Host: x", at_limit))) == 200
    assert status(exchange(port, head(b"GET /metrics HTTP/1.1", b"Host: x", at_limit + b"c"))) == 431


def test_a_head_just_under_the_head_limit_is_served(port):
    base = head(b"GET /metrics HTTP/1.1", b"Host: x")
    line = b"X-H-%03d: " + b"d" * 1000
    lines, size = [], len(base)
    while size + len(line % 0) + 2 + 2 <= http.MAX_HEAD_BYTES:  # each line and its CRLF; the blank line's 2
        lines.append(line % len(lines))
        size += len(lines[-1]) + 2
    request = head(b"GET /metrics HTTP/1.1", b"Host: x", *lines)
    assert http.MAX_HEAD_BYTES - 1100 < len(request) <= http.MAX_HEAD_BYTES
    assert status(exchange(port, request)) == 200


@pytest.mark.parametrize("first, code", [
    (b"GET /metrics?q=" + b"e" * 20_000, 414),  # a request line with no end in sight
    (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"e" * 20_000, 431),  # a header line with no end in sight
])
def test_an_unfinished_line_over_the_limit_is_refused_without_waiting_for_the_rest(port, first, code):
    """A line past the line limit is refused as it arrives: neither the read timeout nor 32 KiB is waited for."""
    started = time.monotonic()
    answer = exchange(port, first)
    assert status(answer) == code, answer[:200]
    assert time.monotonic() - started < http.READ_TIMEOUT_SECONDS / 2


def test_a_dripped_long_line_is_refused_once_it_passes_the_limit(port):
    """The checks are incremental: a request line sent 1 KB at a time is refused at the first read past it."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        client.sendall(b"GET /metrics?q=")
        answer = b""
        for _ in range(http.MAX_LINE_BYTES // 1024 + 4):
            client.sendall(b"f" * 1024)
            if select.select([client], [], [], 0.05)[0]:  # answered: stop sending (more would be reset)
                break
        try:
            while chunk := client.recv(65536):
                answer += chunk
        except OSError:
            pass
    assert status(answer) == 414, answer[:200]


def test_the_limits_hold_over_tls(tmp_path):
    """The same checks on a TLS connection: the refusal is written through TLS, then the connection closed."""
    pytest.importorskip("yaml")
    from sixdim.http import webconfig
    from tests.certs import issue, make_ca

    make_ca(tmp_path)
    issue(tmp_path, "server", "localhost", "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n"
          "extendedKeyUsage=serverAuth\n")
    (tmp_path / "web.yml").write_text(f"tls_server_config:\n  cert_file: {tmp_path}/server.crt\n"
                                      f"  key_file: {tmp_path}/server.key\n")
    server = HttpServer("127.0.0.1", 0, make_app(Source(), lambda: (True, "ok")),
                        web=webconfig.load(str(tmp_path / "web.yml")))
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    try:
        for request, code in [(head(b"GET /metrics HTTP/1.1", b"Host: x", b"X-Big: " + b"a" * 64_000), 431),
                              (head(b"GET /metrics?q=" + b"a" * 40_000 + b" HTTP/1.1", b"Host: x"), 414),
                              (head(b"GET /metrics HTTP/1.1", b"Host: x"), 200)]:
            with context.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=5),
                                     server_hostname="localhost") as client:
                try:
                    client.sendall(request)
                except OSError:  # refused while we were still sending (SSLEOFError, a reset): read the answer
                    pass
                answer = b""
                try:
                    while chunk := client.recv(65536):
                        answer += chunk
                except (OSError, ssl.SSLError):
                    pass
            assert status(answer) == code, answer[:200]
    finally:
        server.shutdown()
