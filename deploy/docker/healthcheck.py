#!/usr/bin/env python3
"""The sixdim image's HEALTHCHECK: GET /healthz on the agent's own listen address.

Exit 0 when /healthz answers 200 (the scheduler runs and its suites can run), 1 otherwise, which Docker counts as
a failed check. Python's standard library only: the image has no curl.

The address is ``SIXDIM_LISTEN`` (``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT``, as ``sixdim serve
--listen`` reads it), default ``0.0.0.0:9480``; an all-interfaces address is asked on the loopback.
A listen address set only in the TOML file is not seen here: set ``SIXDIM_LISTEN`` instead.

With TLS (a web configuration file), the agent answers a plain request with 400; the check then
asks again over HTTPS without verifying the certificate, since it is made for the host's name and
/healthz tells nothing but "the scheduler runs". Basic auth never guards /healthz. An agent that
demands client certificates cannot be checked this way: run it with ``--no-healthcheck``.
Proxy variables are ignored: the agent is on this container's loopback.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request

DEFAULT_LISTEN = "0.0.0.0:9480"
TIMEOUT_SECONDS = 4.0
"""Below the image's HEALTHCHECK --timeout (5 s), so a hung agent is reported by this script."""


def target(listen: str) -> tuple[str, int]:
    """(host, port) to ask, from a listen address."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"SIXDIM_LISTEN={listen!r} is not HOST:PORT")
    host = host.strip("[]")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return host, int(port)


def healthz_url(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://[{host}]:{port}/healthz" if ":" in host else f"{scheme}://{host}:{port}/healthz"


def get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    """Status and first line of the answer; raises OSError where nothing answers."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=TIMEOUT_SECONDS) as response:
            return response.status, response.read(200).decode(errors="replace").strip()
    except urllib.error.HTTPError as error:
        return error.code, error.read(200).decode(errors="replace").strip()


def check(listen: str) -> tuple[bool, str]:
    host, port = target(listen)
    url = healthz_url("http", host, port)
    status, text = get(url)
    if status == 400:  # a TLS endpoint answering a plain request
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        url = healthz_url("https", host, port)
        status, text = get(url, context)
    return status == 200, f"GET {url}: {status} {text.splitlines()[0] if text else ''}".rstrip()


def main() -> int:
    try:
        ok, message = check(os.environ.get("SIXDIM_LISTEN") or DEFAULT_LISTEN)
    except (OSError, ValueError) as error:  # refused, timed out, TLS refused, bad address
        print(f"healthz: {error}", file=sys.stderr)
        return 1
    print(message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
