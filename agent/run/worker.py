"""The worker: the child process that runs the cases of one or more workload runs.

Run as ``python -m sixdim.run.worker REQUEST.json RESULTS.jsonl``.  This is where torch is
imported, inside the functions that run cases, never at module level: the daemon imports this
module only for its protocol constants (:mod:`sixdim.run.runner`) and starts it as a child.  One worker
can run the cases of several workloads (each case names its ``module:function``), so a
suite pays for importing torch and initialising CUDA once.

Results are streamed: the software environment first, then one JSON line per
case as soon as it finishes (flushed and fsynced), so that a crash or a timeout
in case 7 loses nothing of cases 1 to 6.  An exception in a case becomes that
case's ``failed`` result (``unsupported`` for :class:`sixdim.workloads.context.Unsupported`)
and the worker goes on with the next case.  Progress goes to stderr as lines
starting with :data:`PROGRESS_PREFIX`; each finished case also prints
:data:`CASE_DONE_PREFIX`, which restarts the daemon's per-case timeout.

Cases of one worker must not see each other: before each torch case the device's memory
cache is emptied and its peak statistics reset (so a case's memory is its own), and after
it torch's global numeric flags are recorded in the result (``torch_flags``) and restored
(:mod:`sixdim.workloads.measure.flags`), and whatever the timing harness held is freed.  The energy meter
for the power phase is opened once per worker, on the GPUs the daemon names (``gpu_uuids``).

A worker never outlives its agent (:func:`watch_parent`): it is a child subreaper, so whatever it
starts stays below it even after a ``setsid``, and a thread notices within
:data:`PARENT_POLL_SECONDS` when its parent (the agent, named in ``SIXDIM_AGENT_PID``) is gone,
kills everything below the worker and exits.  A thread, not a killing ``PR_SET_PDEATHSIG``: that signal
would kill the worker before it could stop its children (or be ignored by a workload that ignores
SIGTERM), and it fires when the *thread* that started the worker exits, not the agent.  The parent-death
signal is SIGCONT instead: a worker stopped (SIGSTOP, a debugger let go) cannot run its watch thread, and
the SIGCONT its agent's death sends wakes it to do so; a SIGCONT when only the starting thread ended does
nothing to a running process.  When the worker ends normally it stops what its cases left running too.

**The agent's death is not the case's failure.**  The worker's output is a pipe to its agent, so once
the agent is dead the next line the worker or its case prints (progress, a command's output) raises
``BrokenPipeError``.  A case that fails after its agent is gone (of that, or of anything the death
brought about) is not written as a result: the worker leaves at once (:func:`_leave`), and the next
sixdim counts the case in flight in the suite run's one interruption, as it does a case the worker was
killed in, rather than recording a ``failed`` run that would count as a failure.  A case that ended
well is written whatever became of the agent (its result is the case's own), and the parent watch
never stops the worker halfway through writing one (:data:`_WRITING`).
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import signal
import sys
import threading
import time
import traceback
from typing import IO, Any, NoReturn

from sixdim.run.protocol import AGENT_PID_VARIABLE, BUILD_PREFIX, CASE_DONE_PREFIX, OPEN_FILES_VARIABLE, PROGRESS_PREFIX

PARENT_POLL_SECONDS = 0.1
"""How often the worker checks that its agent is still alive."""

ORPHANED_EXIT_CODE = 125
"""The worker's exit status when it stopped itself because its agent was gone."""

AGENT_EXIT_SECONDS = 1.0
"""How long a worker whose pipe to its agent broke waits to see itself re-parented: a dying process's
files (the pipe's reading end) are closed a moment before its children are handed to another parent."""

_agent: int | None = None
"""The agent's PID, once :func:`watch_parent` runs (None: no agent to outlive, as in a unit test)."""

_WRITING = threading.RLock()
"""Held while a case's result is written, and taken for good by a worker leaving for its agent's death:
a result line is written whole or not at all."""


def _stop_below_me() -> list[int]:
    from sixdim.run import proctree

    return proctree.stop_run(os.getpid(), os.environ.get(proctree.TAG_VARIABLE), keep_root=True)


def watch_parent() -> None:
    """Become a subreaper and start the thread that ends this worker, and everything below it,
    when the agent is gone (see the module's docstring)."""
    from sixdim.run import proctree

    global _agent

    proctree.join(os.environ.get(proctree.TAG_VARIABLE, ""))  # into the run's cgroup, before starting anything
    proctree.prctl(proctree.PR_SET_CHILD_SUBREAPER, 1)
    proctree.prctl(proctree.PR_SET_PDEATHSIG, signal.SIGCONT)  # before reading the parent: no death missed
    parent = _agent = int(os.environ.get(AGENT_PID_VARIABLE) or os.getppid())

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        _leave()

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def agent_gone(wait: float = 0.0) -> bool:
    """Whether this worker's agent is dead (the worker re-parented), waiting up to ``wait`` seconds for
    the kernel to re-parent it (:data:`AGENT_EXIT_SECONDS`)."""
    if _agent is None:
        return False
    deadline = time.monotonic() + wait
    while os.getppid() == _agent:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _leave() -> NoReturn:
    """The agent is gone: stop everything below the worker and exit, writing nothing more (not after a
    result being written, nor halfway through one).  The case in flight has no result: the next sixdim
    counts it in its suite run's interruption."""
    _WRITING.acquire()
    _stop_below_me()
    os._exit(ORPHANED_EXIT_CODE)


def _broken_pipe(result: dict[str, Any]) -> bool:
    """Whether a case's failure came of a write to a broken pipe (the agent's, once it is dead)."""
    return "BrokenPipeError" in result.get("reason", "") or \
        "BrokenPipeError" in str(result.get("details", {}).get("traceback", ""))


def _say(line: str) -> None:
    """A line to the agent (progress, a case's end, a build): where the pipe to a dead agent breaks, leave."""
    try:
        print(line, file=sys.stderr, flush=True)
    except BrokenPipeError:
        if agent_gone(AGENT_EXIT_SECONDS):
            _leave()
        raise


def size_torch_threads() -> tuple[int, str]:
    """Give torch as many intra-op threads as the CPUs this process may use (its affinity, bounded by
    its cgroup's CPU quota: :func:`sixdim.collectors.host.cpu_threads`), not torch's default of every
    core, which oversubscribes a container or a restricted affinity.  Returns the count and why."""
    import torch

    from sixdim.collectors.host import cpu_threads

    threads, why = cpu_threads()
    torch.set_num_threads(threads)
    return threads, why


def prepare_device(device: str) -> float:
    """Start a GPU's libraries before the first case: CUDA's context, cuBLAS's and cuBLASLt's handles for the
    float types, cuDNN's.  Each starts lazily at its first use, which otherwise lands in the worker's first
    case: on the H100 its first quick case took 5.2 s more than the same GEMM in fp32 right after it
    (docs/gpu-runs/2026-11-25-h100), counted as that case's device time though no benchmark kernel ran.
    The worker's start-up is not a case's device time (docs/BENCHMARKS.md, "The cost of watching"); its
    length is in the first case's details (``device_setup_seconds``).  Returns the seconds it took (0 on a
    CPU)."""
    if not device.startswith("cuda"):
        return 0.0
    import torch

    started = time.perf_counter()
    target = torch.device(device)
    with torch.cuda.device(target):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            tiny = torch.ones(8, 8, device=target, dtype=dtype)
            torch.mm(tiny, tiny)
        image, kernel = torch.ones(1, 1, 8, 8, device=target), torch.ones(1, 1, 3, 3, device=target)
        torch.nn.functional.conv2d(image, kernel)
        torch.cuda.synchronize(target)
    return time.perf_counter() - started


def software_environment(device: str, uses_torch: bool = True, threads_reason: str | None = None) -> dict[str, Any]:
    """The versions a result was measured under, as seen from inside the worker, and torch's thread
    count with why (``threads_reason`` where :func:`size_torch_threads` already ran, else it runs now)."""
    if not uses_torch:  # a user's command, in whatever framework: do not load torch beside it
        return {"python": platform.python_version()}
    import torch

    why = threads_reason if threads_reason is not None else size_torch_threads()[1]
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda or "",
        "cudnn": "",
        "nccl": "",
        "torch_threads": torch.get_num_threads(),
        "torch_threads_reason": why,
    }
    if device.startswith("cuda"):
        env["cudnn"] = str(torch.backends.cudnn.version() or "")
        try:
            env["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
        except Exception:  # NCCL absent from this build
            env["nccl"] = ""
        env["device_name"] = torch.cuda.get_device_name(torch.device(device))
        major, minor = torch.cuda.get_device_capability(torch.device(device))
        env["compute_capability"] = f"{major}.{minor}"
    from sixdim.workloads.onnx.session import runtime_environment

    env.update(runtime_environment())  # ONNX Runtime's version and providers, where the onnx extra is installed
    return env


def _emit(stream: IO[str], record: dict[str, Any]) -> None:
    stream.write(json.dumps(record) + "\n")
    stream.flush()
    os.fsync(stream.fileno())


def run_case(workload: Any, params: dict[str, Any], ctx: Any, uses_torch: bool = False,
             worker_memory: bool = True) -> dict[str, Any]:
    """One case: its result line, whatever happened inside.

    With ``uses_torch``, the case is isolated from the ones before and after it (memory
    statistics, global flags, harness buffers) and, with ``worker_memory``, its own device memory
    is reported (not where its work runs in rank processes of its own: the worker's would be 0)."""
    from sixdim.workloads.context import Unsupported

    if uses_torch and worker_memory:
        _begin_torch_case(ctx)
    try:
        output = workload(params, ctx)
        result = {"status": output.status, "reason": output.reason, "figures": dict(output.figures),
                  "details": dict(output.details)}
    except Unsupported as exc:
        result = {"status": "unsupported", "reason": str(exc)}
    except Exception as exc:  # the case's failure is its result; the next case still runs
        result = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}",
                  "details": {"traceback": traceback.format_exc(limit=8)}}
    if uses_torch:
        _end_torch_case(ctx, result, worker_memory)
    result["window"] = [ctx.window_start, ctx.window_end]
    return result


def _begin_torch_case(ctx: Any) -> None:
    import gc

    import torch

    from sixdim.workloads.measure import timing

    gc.collect()
    timing.begin_case_memory(ctx, torch.device(ctx.device))


def _end_torch_case(ctx: Any, result: dict[str, Any], worker_memory: bool = True) -> None:
    """Record the case's flags and memory, then put the worker back as it was before the case."""
    import gc

    from sixdim.workloads.measure import flags, timing

    if result["status"] in ("ok", "incorrect"):
        result["details"]["torch_flags"] = flags.current()
        if ctx.memory is None and worker_memory:
            timing.note_memory(ctx)
        if ctx.memory:
            for name, value in ctx.memory.items():
                result["figures"].setdefault(name, value)
    flags.restore()
    timing.release()
    gc.collect()


def main(argv: list[str]) -> int:
    watch_parent()
    _restore_open_files_limit()
    try:
        return _run_request(argv[1], argv[2])
    finally:
        _stop_below_me()  # what a case left running in the background does not outlive the worker


def _restore_open_files_limit() -> None:
    """The soft open-file limit the daemon started with (it raised its own for its connections), so that what
    a case runs sees the host's usual limit (:data:`~sixdim.run.protocol.OPEN_FILES_VARIABLE`)."""
    import resource

    try:
        wanted = int(os.environ.get(OPEN_FILES_VARIABLE, ""))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if 0 < wanted < soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):
        pass  # not given, or refused: the inherited limit stands


def _run_request(request_path: str, results_path: str) -> int:
    with open(request_path) as handle:
        request = json.load(handle)
    from sixdim.workloads.context import RunContext

    cases = request["cases"]
    uses_torch = request.get("uses_torch", True)
    meter = None
    with open(results_path, "a") as results:
        try:
            threads_reason = None
            if uses_torch:
                threads_reason = size_torch_threads()[1]  # before any case, whatever fails after it
                from sixdim.workloads.measure import energy, flags

                flags.remember_defaults()  # also sets CUBLAS_WORKSPACE_CONFIG before cuBLAS starts
                meter = energy.meter_for(request["device"], request.get("gpu_uuids"))
            environment = software_environment(request["device"], uses_torch, threads_reason)
        except Exception as exc:
            environment = {"error": f"{type(exc).__name__}: {exc}"}
        setup: dict[str, Any] = {}  # in the first case's details, not in the environment every record shares
        if uses_torch:
            try:
                setup["device_setup_seconds"] = round(prepare_device(request["device"]), 3)
            except Exception as exc:  # the first case meets the same fault and reports it as its own
                setup["device_setup_error"] = f"{type(exc).__name__}: {exc}"
        _emit(results, {"kind": "environment", "environment": environment})
        entries = request.get("entries") or [request["entry"]] * len(cases)
        for index, (entry, params) in enumerate(zip(entries, cases)):
            module_name, _, function_name = entry.partition(":")
            workload = getattr(importlib.import_module(module_name), function_name)
            prefix = f"case {index + 1}/{len(cases)}: " if len(cases) > 1 else ""

            def progress(message: str, prefix: str = prefix) -> None:
                _say(PROGRESS_PREFIX + prefix + message)

            ctx = RunContext(device=request["device"], progress=progress, energy=meter, announce_build=_announce_build)
            case_started = time.time()
            result = run_case(workload, params, ctx, uses_torch, request.get("worker_memory", True))
            # The case's own wall-clock span: a record's started_at/ended_at are its worker's, shared
            # by every case the worker ran.
            result["wall"] = [case_started, time.time()]
            if index == 0 and setup:
                result["details"] = {**result.get("details", {}), **setup}
            with _WRITING:
                if result["status"] == "failed" and agent_gone(AGENT_EXIT_SECONDS if _broken_pipe(result) else 0.0):
                    _leave()  # failed as (or because) its agent died: the agent's interruption, not a failure
                _emit(results, {"kind": "case", "index": index, **result})
            try:
                sys.stdout.flush()  # what the workload printed goes first, and the marker on a line of its own
            except BrokenPipeError:
                pass  # the marker's own write says what became of the agent
            _say(f"\n{CASE_DONE_PREFIX}{index}")
    return 0


def _announce_build(seconds: float | None, what: str) -> None:
    line = "done" if seconds is None else f"start {seconds:g} {' '.join(what.split())}"
    _say(f"\n{BUILD_PREFIX}{line}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
