#!/usr/bin/env python3
"""A scraper's latency while another address floods the endpoint with wrong passwords (issue 44, item 1).

Usage (from the repository root): ``python -m tests.bench.auth_flood [--seconds 8] [--cost 12] [--flooders 32]``

The real HTTP server in a child process (tests/test_http_resilience.py's ``child_server``) with one basic-auth
user at bcrypt cost 12; ``--flooders`` clients from 127.0.0.2 send distinct wrong passwords back to back; the
scraper, from 127.0.0.1, scrapes ``/metrics`` with the right password every 0.2 s, its first scrape while its
credentials are not verified yet (the agent just started or reloaded), and ``/healthz`` beside it.  Prints
each status count and the latencies (first scrape, then the median and worst of the rest, and of /healthz).
"""

from __future__ import annotations

import argparse
import http.client
import secrets
import statistics
import tempfile
import threading
import time
from pathlib import Path

import bcrypt

from tests.test_http_resilience import AUTHORISED, PASSWORD, basic, child_server, request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--cost", type=int, default=12)
    parser.add_argument("--flooders", type=int, default=32)
    args = parser.parse_args()
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(args.cost)).decode()
    with tempfile.TemporaryDirectory() as folder, \
            child_server(Path(folder), f"basic_auth_users:\n  prometheus: '{hashed}'\n") as server:
        stop = threading.Event()
        flood: dict[object, int] = {}
        lock = threading.Lock()

        def attack() -> None:
            while not stop.is_set():
                try:
                    status: object = request(server, "/metrics", basic("prometheus", secrets.token_hex(8)),
                                             timeout=30, source="127.0.0.2")[0]
                except (OSError, http.client.HTTPException) as exc:
                    status = type(exc).__name__
                with lock:
                    flood[status] = flood.get(status, 0) + 1
        threads = [threading.Thread(target=attack, daemon=True) for _ in range(args.flooders)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        scrapes: list[tuple[int, float]] = []
        probes: list[tuple[int, float]] = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            scrapes.append(request(server, "/metrics", AUTHORISED, timeout=30))
            probes.append(request(server, "/healthz", None, timeout=30))
            time.sleep(0.2)
        stop.set()
        for thread in threads:
            thread.join(40)
    first, rest = scrapes[0], scrapes[1:]
    statuses: dict[int, int] = {}
    for status, _ in scrapes:
        statuses[status] = statuses.get(status, 0) + 1
    print(f"bcrypt cost {args.cost}, {args.flooders} flooders from 127.0.0.2 for {args.seconds:g} s; flood answers: "
          f"{dict(sorted(flood.items(), key=str))}")
    print(f"scraper from 127.0.0.1: {len(scrapes)} scrapes, statuses {statuses}; first (credentials not yet "
          f"verified) {first[0]} in {first[1] * 1000:.0f} ms; the rest median "
          f"{statistics.median(s for _, s in rest) * 1000:.0f} ms, worst {max(s for _, s in rest) * 1000:.0f} ms")
    print(f"/healthz: statuses {sorted({s for s, _ in probes})}, median "
          f"{statistics.median(s for _, s in probes) * 1000:.0f} ms, worst {max(s for _, s in probes) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
