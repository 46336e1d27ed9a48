"""CPU runs under load (issue 29, item 4): torch's threads sized to the CPUs the process may use (its
affinity, bounded by its cgroup's CPU quota), and a default timeout that grows with the host's load.

The hog test uses real busy-loop processes and compares durations as ratios, never against fixed
bounds, so a loaded machine cannot break it."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sixdim.collectors.host import LOAD_MARGIN, MAX_LOAD_FACTOR, cpu_load_factor, cpu_threads
from sixdim.config import load
from sixdim.config.schema import DEFAULT_TIMEOUT_SECONDS
from sixdim.config.suites import case_timeout

ROOT = Path(__file__).resolve().parent.parent


def _tree(root: Path, cpu_max: str | None, loadavg: str = "0.00 0.00 0.00 1/80 1000\n") -> str:
    """A fake / with a cgroup v2 hierarchy whose leaf has ``cpu.max`` = ``cpu_max`` (None: no file)."""
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text("0::/box/leaf\n")
    (root / "proc/loadavg").write_text(loadavg)
    leaf = root / "sys/fs/cgroup/box/leaf"
    leaf.mkdir(parents=True)
    (root / "sys/fs/cgroup/cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    if cpu_max is not None:
        (leaf / "cpu.max").write_text(cpu_max)
    return str(root)


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


def test_a_cgroup_quota_bounds_the_threads(tmp_path):
    threads, why = cpu_threads(_tree(tmp_path, "100000 100000\n"))  # one CPU's worth
    assert threads == 1
    if _affinity() > 1:
        assert "cgroup CPU quota: 1 CPU(s)" in why


@pytest.mark.parametrize(("cpu_max", "expected"), [
    ("150000 100000\n", 2),  # 1.5 CPUs: rounded up
    ("250000 100000\n", 3),
    ("max 100000\n", None),  # no limit at this level
    (None, None),  # no cpu controller here
])
def test_the_quota_is_rounded_up_and_never_above_the_affinity(tmp_path, cpu_max, expected):
    threads, _ = cpu_threads(_tree(tmp_path, cpu_max))
    assert threads == min(expected or _affinity(), _affinity())


def test_the_tightest_level_of_the_hierarchy_wins(tmp_path):
    root = _tree(tmp_path, "400000 100000\n")
    (tmp_path / "sys/fs/cgroup/box/cpu.max").write_text("50000 100000\n")  # the parent: half a CPU
    assert cpu_threads(root)[0] == 1


def test_the_worker_sizes_torch_to_a_restricted_affinity():
    """In a child whose affinity is one CPU, the worker gives torch 1 thread and records it."""
    script = (
        "import json, os\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "import torch\n"
        "from sixdim.run.worker import software_environment, size_torch_threads\n"
        "threads, why = size_torch_threads()\n"
        "env = software_environment('cpu', True, why)\n"
        "print(json.dumps([threads, torch.get_num_threads(), env['torch_threads'], env['torch_threads_reason']]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    threads, torch_threads, recorded, why = json.loads(out.stdout.strip().splitlines()[-1])
    assert threads == torch_threads == recorded == 1
    assert why == "affinity: 1 CPU(s)"


def test_the_load_factor_reads_the_run_queue_and_the_average(tmp_path):
    root = _tree(tmp_path, None, "0.50 0.40 0.30 7/300 4242\n")  # 6 others runnable now
    factor, why = cpu_load_factor(2, root)
    assert factor == pytest.approx(min(MAX_LOAD_FACTOR, 1 + LOAD_MARGIN * 6 / 2))
    assert "6 runnable now" in why
    root = _tree(tmp_path / "b", None, "5.00 0.40 0.30 1/300 4242\n")
    assert cpu_load_factor(4, root)[0] == pytest.approx(1 + LOAD_MARGIN * 5 / 4)
    root = _tree(tmp_path / "c", None, "900.0 1 1 900/901 1\n")
    assert cpu_load_factor(1, root)[0] == MAX_LOAD_FACTOR
    assert cpu_load_factor(2, str(tmp_path / "nowhere"))[0] == 1.0


def test_a_given_timeout_is_never_scaled_and_a_gpu_default_neither(tmp_path):
    root = _tree(tmp_path, None, "1.00 1.00 1.00 2/300 4242\n")
    assert case_timeout(300.0, "cpu", True, root) == (300.0, "given")
    assert case_timeout(600.0, "cuda", False, root)[0] == 600.0
    seconds, why = case_timeout(600.0, "cpu", False, root)
    assert seconds == pytest.approx(600.0 * min(MAX_LOAD_FACTOR, 1 + LOAD_MARGIN / cpu_threads(root)[0]))
    assert why.startswith("the default 600 s x")


def test_the_suite_says_whether_it_set_its_timeout(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[[suites]]\nname = "a"\npreset = "quick"\ninterval_seconds = 60\n\n'
                    '[[suites]]\nname = "b"\npreset = "quick"\ninterval_seconds = 60\ntimeout_seconds = 300\n')
    a, b = load(str(path), env={}).suites
    assert (a.timeout_seconds, a.timeout_given) == (DEFAULT_TIMEOUT_SECONDS, False)
    assert (b.timeout_seconds, b.timeout_given) == (300.0, True)
    default = load(None, env={}).suites[0]  # the embedded default: no fixed 300 s any more
    assert not default.timeout_given


def _hog() -> None:
    while True:
        pass


def _matmuls(count: int) -> float:
    import torch

    a = torch.rand(768, 768)  # each product long enough that its threads rarely wait on each other
    started = time.perf_counter()
    for _ in range(count):
        torch.mm(a, a)
    return time.perf_counter() - started


@pytest.mark.slow  # torch timed alone and beside real busy-loop processes: about 4 s
def test_under_a_real_cpu_hog_the_scaled_timeout_holds_where_the_fixed_one_is_too_short():
    """A CPU run sized to the usable CPUs takes T0 on this host as it is; a fixed timeout of 2 x T0 is
    generous there.  With 2 busy-loop processes per thread beside it, the same work takes 3 x T0 (a fair
    share) to 6 x T0 (torch's threads waiting on each other): the fixed timeout would stop it, the
    scaled default (2 x T0 x the load factor read with the hogs running) does not."""
    import torch

    from sixdim.run.worker import size_torch_threads

    before = torch.get_num_threads()
    try:
        threads, _ = size_torch_threads()
        _matmuls(2)  # torch's thread pool started
        count = 1
        while _matmuls(count) < 0.4 and count < 1 << 20:  # about half a second of work, whatever the CPU
            count *= 2
        idle = min(_matmuls(count) for _ in range(2))
        fixed = 2.0 * idle
        context = multiprocessing.get_context("fork")
        hogs = [context.Process(target=_hog, daemon=True) for _ in range(2 * threads)]
        for hog in hogs:
            hog.start()
        try:
            time.sleep(0.3)  # every hog on the run queue
            scaled, why = case_timeout(fixed, "cpu", False)
            busy = _matmuls(count)
        finally:
            for hog in hogs:
                hog.kill()
            for hog in hogs:
                hog.join()
    finally:
        torch.set_num_threads(before)
    print(f"idle {idle:.2f} s, busy {busy:.2f} s, fixed {fixed:.2f} s, scaled {scaled:.2f} s ({why})")
    assert busy > fixed, f"idle {idle:.2f} s, under the hogs {busy:.2f} s: the hogs did not slow it"
    assert busy < scaled, f"idle {idle:.2f} s, under the hogs {busy:.2f} s, scaled timeout {scaled:.2f} s ({why})"
