"""The ``onnx`` workload's power phase: on a GPU provider, session runs kept queued on a thread of their own.

``session.run`` (and ``run_with_iobinding`` with its synchronisation) returns only once the device's work is
done: called from the power phase's own loop, the GPU would idle whenever the loop reads the energy counter
(an NVML read took 5.8-6.8 ms on an H200, about 11% of each 50 ms block), and the power would read low.
So on a GPU provider the runs go to a thread (:class:`QueuedRuns`) that keeps :data:`QUEUED_SECONDS` of them
waiting while the phase's loop reads; the loop itself only queues.  The phase is given the real device, so
its check of the GPU's busy share applies: a model whose runs leave the GPU idle (host-bound operators,
copies) gets no power, with the reason, rather than an idle-diluted figure.

Imports torch: the worker process only.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import torch

from sixdim.workloads.context import RunContext

QUEUED_SECONDS = 0.02
"""Session runs kept waiting on the thread ahead of the phase's loop: several NVML reads' worth."""
UNIT_KIND = "queued_session_runs"
"""``details["power"]["unit"]`` of a GPU provider's power phase."""


class QueuedRuns:
    """Runs a synchronous ``call`` on a thread of its own, up to ``depth`` calls ahead of the caller.

    :meth:`submit` returns as soon as there is room in the queue, so the caller can read a counter while
    the thread keeps the device busy.  An error of ``call`` stops the runs; :meth:`raise_error` raises it."""

    def __init__(self, call: Callable[[], object], depth: int):
        self.call, self.depth = call, max(1, depth)
        self.completed = 0
        self.error: BaseException | None = None
        self._room = threading.Semaphore(self.depth)
        self._asked = threading.Semaphore(0)
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="sixdim-onnx-power", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            self._asked.acquire()
            if self._stopping:
                return
            try:
                if self.error is None:
                    self.call()
                    self.completed += 1
            except BaseException as exc:  # handed to the caller: the case fails with the run's own error
                self.error = exc
            finally:
                self._room.release()

    def submit(self, calls: int = 1) -> None:
        """Queue ``calls`` runs, waiting while the queue is full."""
        for _ in range(calls):
            self._room.acquire()
            if self.error is not None:
                self._room.release()  # not taken: close() counts the queue's room back to full
                raise self.error
            self._asked.release()

    def close(self) -> None:
        """Wait for every queued run, then stop the thread."""
        for _ in range(self.depth):
            self._room.acquire()
        self._stopping = True
        self._asked.release()
        self._thread.join()

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


def power(call: Callable[[], object], device: torch.device, ctx: RunContext, *, seconds: float,
          seconds_per_call: float, batch: int) -> tuple[dict[str, float], dict[str, Any]]:
    """The power phase of ``call`` (one session run of ``batch`` samples) on ``device``.

    On a CPU the runs are the phase's own calls.  On a GPU they are queued (see the module's docstring) in
    units of at least :data:`sixdim.workloads.measure.timing.POWER_GRAPH_BELOW_SECONDS`, so the phase never tries to
    capture one in a CUDA graph (ONNX Runtime's work runs on its own streams, outside any capture); the
    units completed at each reading lag the queued ones by the queue, at both ends alike."""
    from sixdim.workloads.measure.timing import POWER_GRAPH_BELOW_SECONDS, power_phase

    if device.type != "cuda":
        return power_phase(call, device, ctx, seconds=seconds, seconds_per_unit=seconds_per_call,
                           work_per_call=batch, work_unit="samples")
    per_call = max(seconds_per_call, 1e-9)
    group = max(1, math.ceil(POWER_GRAPH_BELOW_SECONDS / per_call))
    depth = max(2, math.ceil(QUEUED_SECONDS / per_call))
    queue = QueuedRuns(call, depth)
    try:
        with torch.cuda.device(device):  # the phase's events on the worker's GPU, not on GPU 0
            figures, details = power_phase(lambda: queue.submit(group), device, ctx, seconds=seconds,
                                           calls_per_unit=group, seconds_per_unit=group * per_call,
                                           work_per_call=batch, work_unit="samples")
    finally:
        queue.close()
    queue.raise_error()
    phase = details.get("power")
    if phase is not None:
        phase.update(unit=UNIT_KIND, queued_runs=depth, runs_per_unit=group)
    return figures, details
