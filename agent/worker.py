"""The worker: the child process that runs one workload and writes its result.

Run as ``python -m agent.worker REQUEST.json RESULT.json``.  This is the only
place torch is imported; the daemon never imports this module, it starts it.

The result file is written atomically (temporary file, then rename), so the
daemon either finds a complete result or none.  An exception in the workload
becomes a ``failed`` result with its reason; a crash leaves no file, and the
daemon records the signal or exit code instead.  Progress goes to stderr as
lines starting with :data:`PROGRESS_PREFIX`.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import time
import traceback
from typing import Any

PROGRESS_PREFIX = "sixdim-progress: "


def progress(message: str) -> None:
    print(PROGRESS_PREFIX + message, file=sys.stderr, flush=True)


def software_environment(device: str) -> dict[str, Any]:
    """The versions a result was measured under, as seen from inside the worker."""
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
    return env


def write_result(path: str, result: dict[str, Any]) -> None:
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        json.dump(result, handle)
    os.replace(temporary, path)


def main(argv: list[str]) -> int:
    request_path, result_path = argv[1], argv[2]
    with open(request_path) as handle:
        request = json.load(handle)
    from workloads.context import RunContext

    ctx = RunContext(device=request["device"], progress=progress)
    result: dict[str, Any] = {"pid": os.getpid()}
    try:
        module_name, _, function_name = request["entry"].partition(":")
        workload = getattr(importlib.import_module(module_name), function_name)
        output = workload(request["params"], ctx)
        result.update(status="ok", figures=output.figures, details=output.details)
        code = 0
    except BaseException as exc:  # the workload's failure is the result, whatever it was
        result.update(status="failed", reason=f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc(limit=8))
        code = 1
    result["window"] = [ctx.window_start, ctx.window_end]
    result["finished_monotonic"] = time.monotonic()
    try:
        result["environment"] = software_environment(request["device"])
    except Exception as exc:
        result["environment"] = {"error": f"{type(exc).__name__}: {exc}"}
    write_result(result_path, result)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
