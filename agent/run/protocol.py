"""What the daemon and its worker child say to each other, defined once for both sides.

The worker (:mod:`sixdim.run.worker`) prints progress and case-done lines on stderr and streams one
result line per case to a file; the runner (:mod:`sixdim.run.runner`) reads them.  Both import these
names from here, so the daemon never imports the worker module, the one module of the daemon's
packages that reaches torch (inside its functions).
"""

PROGRESS_PREFIX = "sixdim-progress: "
"""A worker's stderr line of progress: the rest of the line is shown to the user."""
CASE_DONE_PREFIX = "sixdim-case-done: "
"""A worker's stderr line after each finished case (its index): restarts the per-case timeout."""

AGENT_PID_VARIABLE = "SIXDIM_AGENT_PID"
"""The agent's PID, given to the worker so that it knows whose child it must stay."""

WORKER_MODULE = "sixdim.run.worker"
"""What the runner starts: ``python -m WORKER_MODULE REQUEST.json RESULTS.jsonl``."""
