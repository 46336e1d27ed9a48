"""The worker: the child process that runs the cases of one or more workload runs.

Run as ``python -m agent.worker REQUEST.json RESULTS.jsonl``.  This is the only
place torch is imported; the daemon never imports this module, it starts it.  One worker
can run the cases of several workloads (each case names its ``module:function``), so a
suite pays for importing torch and initialising CUDA once.

Results are streamed: the software environment first, then one JSON line per
case as soon as it finishes (flushed and fsynced), so that a crash or a timeout
in case 7 loses nothing of cases 1 to 6.  An exception in a case becomes that
case's ``failed`` result (``unsupported`` for :class:`workloads.context.Unsupported`)
and the worker goes on with the next case.  Progress goes to stderr as lines
starting with :data:`PROGRESS_PREFIX`; each finished case also prints
:data:`CASE_DONE_PREFIX`, which restarts the daemon's per-case timeout.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import traceback
from typing import IO, Any

PROGRESS_PREFIX = "sixdim-progress: "
CASE_DONE_PREFIX = "sixdim-case-done: "


def software_environment(device: str, uses_torch: bool = True) -> dict[str, Any]:
    """The versions a result was measured under, as seen from inside the worker."""
    if not uses_torch:  # a user's command, in whatever framework: do not load torch beside it
        return {"python": platform.python_version()}
    import torch

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda or "",
        "cudnn": "",
        "nccl": "",
        "torch_threads": torch.get_num_threads(),
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
    return env


def _emit(stream: IO[str], record: dict[str, Any]) -> None:
    stream.write(json.dumps(record) + "\n")
    stream.flush()
    os.fsync(stream.fileno())


def run_case(workload: Any, params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """One case: its result line, whatever happened inside."""
    from workloads.context import Unsupported

    try:
        output = workload(params, ctx)
        result = {"status": output.status, "reason": output.reason, "figures": output.figures,
                  "details": output.details}
    except Unsupported as exc:
        result = {"status": "unsupported", "reason": str(exc)}
    except Exception as exc:  # the case's failure is its result; the next case still runs
        result = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}",
                  "details": {"traceback": traceback.format_exc(limit=8)}}
    result["window"] = [ctx.window_start, ctx.window_end]
    return result


def main(argv: list[str]) -> int:
    request_path, results_path = argv[1], argv[2]
    with open(request_path) as handle:
        request = json.load(handle)
    from workloads.context import RunContext

    cases = request["cases"]
    with open(results_path, "a") as results:
        try:
            environment = software_environment(request["device"], request.get("uses_torch", True))
        except Exception as exc:
            environment = {"error": f"{type(exc).__name__}: {exc}"}
        _emit(results, {"kind": "environment", "environment": environment})
        entries = request.get("entries") or [request["entry"]] * len(cases)
        for index, (entry, params) in enumerate(zip(entries, cases)):
            module_name, _, function_name = entry.partition(":")
            workload = getattr(importlib.import_module(module_name), function_name)
            prefix = f"case {index + 1}/{len(cases)}: " if len(cases) > 1 else ""

            def progress(message: str, prefix: str = prefix) -> None:
                print(PROGRESS_PREFIX + prefix + message, file=sys.stderr, flush=True)

            ctx = RunContext(device=request["device"], progress=progress)
            result = run_case(workload, params, ctx)
            _emit(results, {"kind": "case", "index": index, **result})
            print(f"{CASE_DONE_PREFIX}{index}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
