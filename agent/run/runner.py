"""Runs one workload in a child process, with a timeout, and classifies how it ended.

The child is a fresh interpreter (``python -m sixdim.run.worker``) in its own session
and process group, tagged (:data:`sixdim.run.proctree.TAG_VARIABLE`) and made a child subreaper, so
that a timeout or shutdown stops it and everything it started, a ``setsid`` grandchild included
(:func:`sixdim.run.proctree.stop_run`; SIGTERM to all of them first, SIGKILL after
:data:`TERMINATE_GRACE_SECONDS`).  Whatever happens there (an exception, a signal, a hang, the OOM
killer), the daemon gets a :class:`WorkerOutcome` and keeps serving.  Being in its own session,
the worker gets no Ctrl-C from the terminal: whoever runs it stops it (``stop``), and however
:func:`run_worker` ends, an exception in the caller included, every process of the run is killed
and the temporary folder removed.  If the agent itself dies, the worker notices and does the same
(:func:`sixdim.run.worker.watch_parent`).

While the worker runs, an optional ``between_cases`` hook (the idle guard) is asked after
each case and every :data:`BETWEEN_CASES_INTERVAL_SECONDS`; a reason from it stops the
worker like a timeout, and the cases left are ``skipped`` with that reason.  An optional ``on_case``
hook gets each case's result as the worker reports it, while the worker goes on (the executor
records it then, so a case is in the history when it ends, not when its worker does).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sixdim.core.results import INTERRUPTED
from sixdim.run import proctree
from sixdim.run.protocol import (
    AGENT_PID_VARIABLE,
    BUILD_PREFIX,
    CASE_DONE_PREFIX,
    MAX_BUILD_SECONDS,
    PROGRESS_PREFIX,
    WORKER_MODULE,
)
from sixdim.workloads.logs.lines import bounded_lines, stream_chunks

TERMINATE_GRACE_SECONDS = 3.0
"""After SIGTERM, how long every process of the run (the worker and what it started) has before
SIGKILL."""

BETWEEN_CASES_INTERVAL_SECONDS = 2.0
"""While a case runs, how often ``between_cases`` is asked too (besides after each case), so a long
case does not keep the GPU from a job that started meanwhile."""

STOPPING_REASON = f"{INTERRUPTED}: sixdim is shutting down (a signal to the daemon or to sixdim run)"
"""Why a stop request ended a worker: the reason of its suite run's one interruption (no case it left is a run)."""

RESULTS_FILE = "results.jsonl"
"""The worker's streamed results, in its run folder (a worker record's folder keeps it for a successor)."""
RUN_FILE_MODE = 0o600
"""The request and the results (commands, their output): the agent's user's alone, whatever the umask."""

STDERR_TAIL_LINES = 8
"""Lines of the worker's own output kept for a failure reason (those since the last finished case)."""
MAX_LINE_BYTES = 4096
"""A longer output line is cut here (with a note of how much was cut): a workload printing one
huge line without a newline must not grow the daemon's memory or its history rows.  With the
tail's line count this bounds what is kept per worker to 32 KiB."""


@dataclass
class CaseResult:
    """What the worker reported for one case."""

    status: str  # ok, failed, unsupported, incorrect
    reason: str = ""
    figures: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    window: tuple[float, float] | None = None
    wall: tuple[float, float] | None = None
    """The case's start and end in Unix time, as the worker saw them (None: it reported no result)."""


@dataclass
class WorkerOutcome:
    """How a worker ended: the cases it reported, and why the rest (if any) have no result."""

    cases: dict[int, CaseResult] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"  # for the first case without a result: failed, timeout or skipped
    reason: str = ""
    returncode: int | None = None
    output_tail: list[str] = field(default_factory=list)
    started_at: float | None = None
    """Unix time the worker was started (None: it never was, the run ended before it)."""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _terminate(pid: int, tag: str) -> None:
    """SIGTERM to every process of the run (its group, below the worker, tagged): a chance to end
    cleanly, which the ones that left the group would not get from ``killpg`` alone."""
    found = proctree.run_processes(pid, tag)  # first, while the worker (a subreaper) still holds the tree
    _kill_group(pid, signal.SIGTERM)
    for process in found:
        proctree.send(process, signal.SIGTERM)


def _kill_run(pid: int, tag: str) -> None:
    """SIGKILL every process of the run, the worker's whole tree first (frozen, so none escapes
    while it is killed), then what is left of its group."""
    proctree.stop_run(pid, tag)
    _kill_group(pid, signal.SIGKILL)


class _OutputReader(threading.Thread):
    """Reads the worker's merged stdout/stderr: relays progress, keeps the tail for failure reasons.

    The tail holds the lines since the last finished case only, so a case's failure reason never
    quotes what an earlier case printed."""

    def __init__(self, stream: Any, on_progress: Callable[[str], None] | None):
        super().__init__(daemon=True, name="worker-output")
        self._stream = stream
        self._on_progress = on_progress
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.last_case_done = time.monotonic()
        self.cases_done = 0
        self.build_until: float | None = None
        """While the worker runs a one-off build (protocol.BUILD_PREFIX): when its allowance ends."""
        self.build: tuple[str, float] | None = None
        """The build in progress, or the last one: what, and its allowance in seconds."""

    def run(self) -> None:
        for line in bounded_lines(stream_chunks(self._stream), MAX_LINE_BYTES):
            if line.startswith(CASE_DONE_PREFIX):
                self.last_case_done = time.monotonic()
                self.cases_done += 1
                self.tail.clear()
                self.build_until = None
            elif line.startswith(BUILD_PREFIX):
                self._build(line[len(BUILD_PREFIX):])
            elif line.startswith(PROGRESS_PREFIX):
                if self._on_progress is not None:
                    self._on_progress(line[len(PROGRESS_PREFIX):])
            elif line:
                self.tail.append(line)

    def _build(self, text: str) -> None:
        """A build starts (its allowance replaces the case's timeout) or ends (the case's timeout starts
        afresh).  An allowance that is not a positive number is ignored: the case's timeout stands."""
        word, _, rest = text.partition(" ")
        if word == "done":
            if self.build_until is not None:
                self.build_until = None
                self.last_case_done = time.monotonic()
            return
        seconds, _, what = rest.partition(" ")
        try:
            allowance = min(float(seconds), MAX_BUILD_SECONDS)
        except ValueError:
            return
        if word == "start" and allowance > 0:
            self.build = (what or "a build", allowance)
            self.build_until = time.monotonic() + allowance


CaseHook = Callable[[int, CaseResult, dict[str, Any]], None]
"""``on_case(index, result, environment)``: a case the worker reported, with the environment it reported first."""


class _CaseFeed:
    """Hands each case the worker streams to ``on_case`` once its case-done line arrives: reads the
    results file from where it stopped, whole lines only (the worker writes and fsyncs a case's line
    before it prints its case-done line)."""

    def __init__(self, path: str, on_case: CaseHook):
        self._path = path
        self._on_case = on_case
        self._offset = 0
        self._seen = 0
        self._environment: dict[str, Any] = {}

    def poll(self, cases_done: int) -> None:
        """Hand on the cases before index ``cases_done`` (those a check after them found the GPU clear for)."""
        if cases_done == self._seen:
            return
        self._seen = cases_done
        try:
            with open(self._path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except OSError:
            return
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            [record] = _records([line]) or [{}]
            if record.get("kind") == "case" and record["index"] >= cases_done:
                break  # not checked yet: read again at the next poll
            self._offset += len(line)
            if record.get("kind") == "environment":
                self._environment = record["environment"]
            elif record.get("kind") == "case":
                self._on_case(record["index"], _case_result(record), dict(self._environment))


def run_worker(entry: str | list[str], cases: list[dict[str, Any]], device: str, timeout: float, *,
               env: dict[str, str] | None = None,
               on_start: Callable[[int], None] | None = None,
               on_progress: Callable[[str], None] | None = None,
               on_case: CaseHook | None = None,
               stop: threading.Event | None = None, uses_torch: bool = True, worker_memory: bool = True,
               gpu_uuids: list[str] | None = None,
               between_cases: Callable[[], str | None] | None = None,
               between_cases_interval: float = BETWEEN_CASES_INTERVAL_SECONDS,
               workdir: str | None = None, tag: str | None = None) -> WorkerOutcome:
    """Run ``entry`` (``module:function``, or one per case) on each case's parameters on ``device``,
    in one child process.

    ``timeout`` applies per case: it restarts each time a case finishes, so a long
    suite is not cut short while a hung case is still stopped.  ``env`` is added to
    the child's environment (CUDA_VISIBLE_DEVICES, for one).  ``on_start`` gets the
    child's PID (for telemetry).  Setting ``stop`` ends the child early; the cases
    left are then ``skipped`` with reason "interrupted".

    ``gpu_uuids`` (NVML UUIDs of the GPUs the worker runs on) goes into the request, where the
    worker opens its energy counter by them; left out when None.  ``worker_memory`` False: the
    cases run their work in rank processes of their own, so the worker measures no memory of its
    own for them (:attr:`sixdim.workloads.spec.WorkloadSpec.runs_in_ranks`).

    ``between_cases`` is asked each time a case finishes (before the case is handed to ``on_case``), every
    ``between_cases_interval`` seconds while one runs, and once more when the worker has exited; a case is
    recorded only once a check after its end found the GPU clear, and a busy answer makes the cases since the
    last clear check ``skipped`` with it; a non-None answer is a reason to stop (the idle guard: someone
    else's job has started on the GPU).  The worker is then stopped as at a timeout, and the
    running case and those after it are ``skipped`` with that reason.  If the hook itself raises,
    that is taken as the reason (the guard fails closed).

    ``on_case`` gets each case's result (and the worker's environment) as soon as the worker has
    reported it, on the calling thread, while the worker goes on; a case the worker reported just
    before it ended may reach only the returned outcome.

    ``workdir``: where the request and the streamed results go (the agent's worker record folder,
    so that a successor finds them if the agent dies); by default a temporary folder, removed
    after.  ``tag`` marks the run's processes (default: a fresh one).
    """
    tag = tag or new_tag()
    if workdir is not None:
        return _run_in(workdir, tag, entry, cases, device, timeout, env, on_start, on_progress, stop, uses_torch,
                       worker_memory, gpu_uuids, between_cases, between_cases_interval, on_case)
    with tempfile.TemporaryDirectory(prefix="sixdim-run-") as temporary:
        os.chmod(temporary, 0o700)  # mkdtemp's mode, less the umask: exactly it
        return _run_in(temporary, tag, entry, cases, device, timeout, env, on_start, on_progress, stop, uses_torch,
                       worker_memory, gpu_uuids, between_cases, between_cases_interval, on_case)


def new_tag() -> str:
    """A name for one run's processes, unique on the host."""
    return f"{os.getpid()}-{time.time_ns()}-{os.urandom(4).hex()}"


def _run_in(workdir: str, tag: str, entry: str | list[str], cases: list[dict[str, Any]], device: str, timeout: float,
            env: dict[str, str] | None, on_start: Callable[[int], None] | None,
            on_progress: Callable[[str], None] | None, stop: threading.Event | None, uses_torch: bool,
            worker_memory: bool, gpu_uuids: list[str] | None, between_cases: Callable[[], str | None] | None,
            between_cases_interval: float, on_case: CaseHook | None = None) -> WorkerOutcome:
    request_path = os.path.join(workdir, "request.json")
    results_path = os.path.join(workdir, RESULTS_FILE)
    # made here, 0600 whatever the umask (open's 0666 less a umask of 000 would be 0666), the results file too:
    # the worker appends to it, and a file it created would have the worker's umask
    os.close(_private_file(results_path, 0))
    with open(_private_file(request_path, os.O_TRUNC), "w") as handle:
        entries = entry if isinstance(entry, list) else [entry] * len(cases)
        request: dict[str, Any] = {"entries": entries, "cases": cases, "device": device,
                                   "uses_torch": uses_torch, "worker_memory": worker_memory}
        if gpu_uuids is not None:
            request["gpu_uuids"] = list(gpu_uuids)
        json.dump(request, handle)
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {}), proctree.TAG_VARIABLE: tag,
                 AGENT_PID_VARIABLE: str(os.getpid())}
    worker_started = time.time()
    proctree.prepare(tag)  # the run's cgroup, which the worker joins first thing (where the host allows one)
    process = subprocess.Popen(
        [sys.executable, "-m", WORKER_MODULE, request_path, results_path],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=child_env, start_new_session=True)
    try:
        reader = _OutputReader(process.stdout, on_progress)
        reader.start()
        if on_start is not None:
            on_start(process.pid)
        feed = _CaseFeed(results_path, on_case) if on_case is not None else None
        ended_by, busy, clear = _wait(process, timeout, stop, reader, between_cases, between_cases_interval, tag,
                                      feed)
    finally:  # also when waiting was cut short (KeyboardInterrupt): no worker outlives its run
        if process.poll() is None:  # not reaped, so its PID is still its own: stop its whole tree
            _kill_run(process.pid, tag)
            process.wait()
        else:  # reaped: its PID may be reused, but the group lives on while any member does
            _kill_group(process.pid, signal.SIGKILL)
        proctree.stop_run(None, tag)  # what the worker left behind, detached or not
    reader.join(timeout=2.0)
    outcome = read_results(results_path)
    outcome.returncode = process.returncode
    outcome.started_at = worker_started
    outcome.output_tail = list(reader.tail)
    if busy:
        _withhold_unchecked(outcome, clear, busy)
    if len(outcome.cases) < len(cases):
        outcome.status, outcome.reason = _why_incomplete(process.returncode, ended_by, timeout,
                                                        outcome.output_tail, busy)
        if ended_by == "timeout" and reader.build_until is not None and reader.build is not None:
            what, allowance = reader.build
            outcome.reason = (f"did not finish building {what} within the {allowance:g} s allowed for it; stopped "
                              f"(nothing was cached: the next run builds it again)")
    return outcome


def _private_file(path: str, flags: int) -> int:
    """A descriptor open for writing on ``path``, created if missing, mode :data:`RUN_FILE_MODE` (``fchmod``:
    the umask takes bits from the mode ``open`` is given, and leaves them all where it is 000)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | flags, RUN_FILE_MODE)
    try:
        os.fchmod(fd, RUN_FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _ask(between_cases: Callable[[], str | None]) -> str | None:
    try:
        return between_cases()
    except Exception as exc:  # a guard that cannot answer must not let the run go on
        return f"the between-cases check failed: {type(exc).__name__}: {exc}"


def _wait(process: subprocess.Popen, timeout: float, stop: threading.Event | None, reader: _OutputReader,
          between_cases: Callable[[], str | None] | None = None,
          interval: float = BETWEEN_CASES_INTERVAL_SECONDS, tag: str = "", feed: _CaseFeed | None = None
          ) -> tuple[str, str, int]:
    """Wait for the child; returns how it ended ('exit', 'timeout', 'stop' or 'busy'), the busy reason (else
    "") and how many cases the last clear check came after, having stopped the child if needed.

    With ``between_cases``, a case is handed on (``feed``) only once a check after its end found the GPU clear,
    and one more check follows the worker's exit, so that no case, the last included, is recorded unchecked."""
    checked_at, checked_cases = time.monotonic(), 0
    clear = 0 if between_cases is not None else sys.maxsize
    busy = ""
    while True:
        try:
            process.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            if feed is not None and between_cases is None:
                feed.poll(reader.cases_done)
        else:
            if between_cases is not None:
                answer = _ask(between_cases)
                if answer is not None:
                    return "exit", answer, clear
            return "exit", "", sys.maxsize
        now = time.monotonic()
        building = reader.build_until
        if (now >= building) if building is not None else (now - reader.last_case_done >= timeout):
            reason = "timeout"
        elif stop is not None and stop.is_set():
            reason = "stop"
        elif between_cases is not None and (reader.cases_done != checked_cases or now - checked_at >= interval):
            done = reader.cases_done  # read before asking: a case ending during the check waits for the next
            checked_at, checked_cases = now, done
            answer = _ask(between_cases)
            if answer is None:
                clear = done
                if feed is not None:
                    feed.poll(clear)
                continue
            reason, busy = "busy", answer
        else:
            continue
        _terminate(process.pid, tag)
        deadline = time.monotonic() + TERMINATE_GRACE_SECONDS
        try:
            process.wait(timeout=TERMINATE_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            _kill_run(process.pid, tag)
            process.wait()
        else:
            _grace_for_the_rest(tag, deadline)
        if between_cases is not None and not busy:
            # the worker is gone: no case can end after this check, the ones that ended since the last included
            busy = _ask(between_cases) or ""
            clear = clear if busy else sys.maxsize
        return reason, busy, clear


def _withhold_unchecked(outcome: WorkerOutcome, clear: int, busy: str) -> None:
    """The cases reported after the last clear check, when the next check found the GPU busy: when in them the
    other process started cannot be told, so their figures are not kept; each is ``skipped`` with the reason."""
    for index, case in list(outcome.cases.items()):
        if index >= clear:
            outcome.cases[index] = CaseResult("skipped", f"{busy} (found as this case ended, so its figures may "
                                                        f"include that process's work)", wall=case.wall)


def _grace_for_the_rest(tag: str, deadline: float) -> None:
    """A worker that ends at once on SIGTERM must not cut its children's grace short: a training
    command got the same SIGTERM and may be writing a checkpoint.  Wait, until the grace's end, for
    the run's tagged processes to go; the caller kills whatever is left."""
    while time.monotonic() < deadline and proctree.run_processes(None, tag):
        time.sleep(0.05)


def _why_incomplete(returncode: int, ended_by: str, timeout: float, tail: list[str],
                    busy: str = "") -> tuple[str, str]:
    if ended_by == "timeout":
        return "timeout", f"did not finish within its timeout of {timeout:g} s; stopped"
    if ended_by == "stop":
        return "skipped", STOPPING_REASON
    if ended_by == "busy":
        return "skipped", busy
    last = next((line for line in reversed(tail) if line.strip()), "")
    if returncode < 0:
        name = _signal_name(-returncode)
        hint = " (the kernel's OOM killer sends SIGKILL: check dmesg)" if returncode == -signal.SIGKILL else ""
        reason = f"worker killed by {name}{hint}"
    elif returncode != 0:
        reason = f"worker exited with code {returncode}"
    else:
        reason = "worker exited without writing a result"
    if last:
        reason += f"; last output: {last[-300:]}"
    return "failed", reason


def _records(lines: Iterable[str | bytes]) -> Iterator[dict[str, Any]]:
    """The worker's result records in its results file's lines; a line cut short (the worker killed while
    writing it) is skipped, for the live reader and the final read alike."""
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def read_results(path: str) -> WorkerOutcome:
    """Parse the streamed results; a torn last line (the worker died mid-write) is ignored."""
    outcome = WorkerOutcome()
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return outcome
    for record in _records(lines):
        if record.get("kind") == "environment":
            outcome.environment = record["environment"]
        elif record.get("kind") == "case":
            outcome.cases[record["index"]] = _case_result(record)
    return outcome


def _case_result(record: dict[str, Any]) -> CaseResult:
    """A case's result line as the worker streamed it."""
    window = record.get("window") or [None, None]
    wall = record.get("wall") or [None, None]
    return CaseResult(status=record["status"], reason=record.get("reason", ""), figures=record.get("figures", {}),
                      details=record.get("details", {}), window=None if None in window else (window[0], window[1]),
                      wall=None if None in wall else (wall[0], wall[1]))
