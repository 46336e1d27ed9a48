#!/usr/bin/env python3
"""A plausible history, and the HTML report of it: the screenshot in the README and docs/REPORT.md.

Usage (from the repository root):

    python -m tests.bench.html_report_demo [--out report.html] [--history FILE] [--screenshot PNG]

The data are synthetic (a fixed seed), and the page says so.  One host, ``gpu-node-07``, with two
H100 SXM GPUs, three weeks of runs (2026-10-30 to 2026-11-20 UTC):

- ``gemm`` (m=n=k=8192) in bf16 and fp32 every 2 hours on each GPU; GPU 1 about 2% slower than GPU 0;
- ``resnet50`` training (bf16, batch 256) every 2 hours on each GPU;
- ``convergence`` (digits MLP, fp32: accuracy, time to train, stability) once a day on each GPU;
- ``linearity`` (resnet50 on both GPUs: the card linearity) twice a day, recorded on GPU 0;
- noise: time 1% Gaussian; power 1%; a few runs failed, timed out or skipped (GPU busy);
- on day 6, torch 2.12.1 (CUDA 12.4) -> 2.13.0 (CUDA 12.6): resnet50 3% faster;
- on day 13, driver 550.54.15 -> 560.28.03: bf16 GEMM 7% slower (fp32 unchanged).

With ``--screenshot`` it also opens the page in headless Chromium (Debian's ``chromium``) and
writes a PNG of the top of it, 1400 px wide (the README's is docs/images/html-report.png).

``--bench SERIES RUNS`` instead times ``python -m sixdim report html`` (a child, end to end, 3 times)
over tests/bench/report_bench.py's fleet history of SERIES x RUNS runs (``--bench 50 2000``: 100,000 runs;
``--bench 2000 50``: as many runs over 1,648 series), the figures docs/REPORT.md quotes.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sixdim.core.results import RunRecord  # noqa: E402
from sixdim.store.history import History  # noqa: E402
from sixdim.store.rows import row_of as _row  # noqa: E402

START = datetime(2026, 10, 30, tzinfo=timezone.utc).timestamp()
DAYS = 21
HOST = "gpu-node-07"
MODEL = "NVIDIA H100 80GB HBM3"
GPUS = (("0", "GPU-3f1c9a52-7d0e-4b1a-9c55-1e2f3a4b5c6d", "00000000:18:00.0", 1.0),
        ("1", "GPU-8a2e4c71-0b3d-4f6e-8a12-9b8c7d6e5f4a", "00000000:2A:00.0", 0.98))
TORCH_CHANGE = START + 5.5 * 86400
DRIVER_CHANGE = START + 12.4 * 86400
NOTE = ("Synthetic demo data (tests/bench/html_report_demo.py): one host with two H100 GPUs, three weeks; a torch "
        "upgrade on day 6 made resnet50 3% faster and a driver upgrade on day 13 made bf16 GEMM 7% slower.")


def environment(at: float) -> dict[str, str]:
    new_torch = at >= TORCH_CHANGE
    return {"driver": "560.28.03" if at >= DRIVER_CHANGE else "550.54.15",
            "cuda_runtime": "12.6" if new_torch else "12.4", "cudnn": "9.5.1" if new_torch else "9.1.0",
            "nccl": "2.23.4" if new_torch else "2.21.5", "torch": "2.13.0" if new_torch else "2.12.1",
            "vbios": "96.00.99.00.01", "python": "3.11.7"}


def records(seed: int = 7) -> list[RunRecord]:
    rnd = random.Random(seed)
    out: list[RunRecord] = []

    def add(workload: str, precision: str, shape: str, gpu: tuple, at: float, seconds: float, figures: dict,
            params: dict, mode: str = "training") -> None:
        status = "ok"
        roll = rnd.random()
        if roll < 0.004:
            status = "failed"
        elif roll < 0.006:
            status = "timeout"
        elif roll < 0.014:
            status = "skipped"
        index, gpu_uuid, bus, _ = gpu
        out.append(RunRecord(
            suite="quick", workload=workload, precision=precision, params=params, shape=shape, mode=mode,
            kernel_pass="forward", hostname=HOST, device_type="cuda", device=f"cuda:{index}", gpu=index,
            uuid=gpu_uuid, model_name=MODEL, pci_bus_id=bus, status=status,
            reason={"ok": "", "failed": "RuntimeError: CUDA error: an illegal memory access was encountered",
                    "timeout": "no case finished within 600 s",
                    "skipped": "GPU busy: another process (PID 48213) is using it"}[status],
            started_at=at, ended_at=at + seconds * 50 + 3, figures=figures if status == "ok" else {},
            environment=environment(at), uid=uuid.uuid4().hex))

    def noise() -> float:
        return 1 + rnd.gauss(0, 0.01)

    for step in range(DAYS * 12):  # every 2 hours
        base = START + step * 7200
        for gpu in GPUS:
            speed = gpu[3]
            at = base + (0 if gpu[0] == "0" else 240) + rnd.uniform(0, 60)
            for precision, tflops, watts in (("bf16", 702e12, 690.0), ("fp32", 51.2e12, 560.0)):
                m = 8192
                work = 2 * m ** 3
                slow = 1 / 0.93 if precision == "bf16" and at >= DRIVER_CHANGE else 1.0
                seconds = work / (tflops * speed) * slow * noise()
                flops = work / seconds
                power = watts * (1 + rnd.gauss(0, 0.01))
                peak = 989.4e12 if precision == "bf16" else 66.9e12
                add("gemm", precision, f"m={m},n={m},k={m},op=NN", gpu, at, seconds,
                    {"seconds": seconds, "flops": flops, "power_watts": power, "energy_joules": power * seconds * 50,
                     "flop_per_joule": flops / power, "memory_bytes": 3 * m * m * (2 if precision == "bf16" else 4),
                     "peak_ratio": flops / peak, "sm_clock_hertz": 1.755e9, "seconds_iqr_ratio": 0.004},
                    {"m": m, "n": m, "k": m, "op": "NN"})
                at += 40
            batch = 256
            fast = 1.03 if at >= TORCH_CHANGE else 1.0
            seconds = batch / (2950.0 * speed * fast) * noise()
            power = 640.0 * (1 + rnd.gauss(0, 0.01))
            add("resnet50", "bf16", f"resnet50,batch={batch}", gpu, at + 60, seconds,
                {"seconds": seconds, "samples_per_second": batch / seconds, "power_watts": power,
                 "samples_per_joule": batch / seconds / power,
                 "memory_bytes": 38.2 * 2 ** 30 * (1 + rnd.gauss(0, 0.002)),
                 "latency_p50_seconds": seconds * 0.99, "latency_p99_seconds": seconds * 1.06},
                {"model": "resnet50", "batch": batch})
            if step % 12 == 3:  # once a day
                sps = 1.9e5 * speed * noise()
                add("convergence", "fp32", "digits-mlp,target=0.95", gpu, at + 300, 0.02,
                    {"samples_per_second": sps, "accuracy": 0.972 + rnd.gauss(0, 0.002), "stability_ratio": 1.0,
                     "time_to_train_seconds": 4.1 * (1 + rnd.gauss(0, 0.02)), "power_watts": 180 * noise(),
                     "memory_bytes": 210 * 2 ** 20},
                    {"model": "digits-mlp", "target": 0.95})
            if step % 6 == 5 and gpu[0] == "0":  # twice a day, host-wide, recorded on the first GPU
                sps = 2 * 2950.0 * 0.966 * (1.03 if at >= TORCH_CHANGE else 1.0) * noise()
                add("linearity", "bf16", "resnet50,batch=256,cards=2", gpu, at + 600, 256 / sps,
                    {"samples_per_second": sps, "linearity_ratio": 0.966 * noise(), "linearity_count": 2,
                     "power_watts": 1270 * noise()},
                    {"model": "resnet50", "count": 2})
    return out


def write_history(path: Path, seed: int = 7) -> int:
    """The demo history at ``path`` (replaced); returns the number of runs."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    History(path).close()  # the schema, as the agent creates it
    rows = [_row(r) for r in sorted(records(seed), key=lambda r: r.started_at)]
    columns = list(rows[0])
    with sqlite3.connect(path) as db:
        db.executemany(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})", rows)
    return len(rows)


def render(history: Path, out: Path) -> dict:
    """The page, as ``sixdim report html`` writes it, with the demo note; returns build()'s facts."""
    from sixdim.core.files import write_atomically
    from sixdim.report.html import build

    page, facts = build(str(history), now=START + DAYS * 86400, note=NOTE)
    write_atomically(out, page, make_folder=False)
    return facts


def screenshot(page: Path, png: Path, width: int = 1400, height: int = 2200) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed (Debian package 'chromium')")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={profile}", "--virtual-time-budget=10000", f"--window-size={width},{height}",
                        f"--screenshot={png}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)


def bench(series: int, runs: int, keep: str | None = None) -> int:
    """Time the command over report_bench's history (see the module's docstring)."""
    import os
    import resource

    from tests.bench.report_bench import build_series
    from tests.bench.report_bench import write_history as write_fleet

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        history, page = folder / "history.db", folder / "report.html"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{history}{suffix}").unlink(missing_ok=True)
        write_fleet(history, build_series(series), runs, 1)
        print(f"history: {series * runs:,} runs of {series} series, {history.stat().st_size / 2 ** 20:.1f} MiB")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
        walls = []
        for _ in range(3):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "sixdim", "report", "--html", str(page), "--history", str(history)],
                           check=True, env=env, cwd=REPO)
            walls.append(time.perf_counter() - t)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"end to end: {', '.join(f'{w:.2f}' for w in walls)} s (best {min(walls):.2f} s); "
              f"child peak RSS {rss:.0f} MiB; page {page.stat().st_size / 1e6:.2f} MB")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="report.html", help="the page (default: report.html)")
    ap.add_argument("--history", help="write the history here and keep it (default: a temporary file)")
    ap.add_argument("--screenshot", metavar="PNG", help="also write a screenshot of the page's top")
    ap.add_argument("--height", type=int, default=2200, help="screenshot height in pixels (default 2200)")
    ap.add_argument("--bench", nargs=2, type=int, metavar=("SERIES", "RUNS"),
                    help="time the command over a fleet history of SERIES x RUNS runs instead")
    args = ap.parse_args(argv)
    if args.bench:
        return bench(*args.bench, keep=args.history and str(Path(args.history).parent))
    with tempfile.TemporaryDirectory() as scratch:
        history = Path(args.history or Path(scratch) / "history.db")
        t = time.perf_counter()
        runs = write_history(history)
        print(f"history: {runs:,} runs in {history} ({time.perf_counter() - t:.1f} s)")
        facts = render(history, Path(args.out))
        print(f"page: {args.out}, {Path(args.out).stat().st_size / 1e6:.2f} MB, {facts['charts']} charts, "
              f"{facts['seconds']:.2f} s")
        if args.screenshot:
            screenshot(Path(args.out), Path(args.screenshot), height=args.height)
            print(f"screenshot: {args.screenshot}, {Path(args.screenshot).stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
