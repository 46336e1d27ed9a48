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

BUILD_PREFIX = "sixdim-build: "
"""A worker's stderr line around a one-off build whose result outlives the run (a TensorRT engine, kept
in a cache): ``start SECONDS WHAT`` before it, ``done`` after.  While it builds, the case's timeout is
replaced by the SECONDS the build may take (at most :data:`MAX_BUILD_SECONDS`); after it the case's
own timeout starts afresh.  A build cut off by a case's timeout would leave no cached engine, and
every later run would start it again."""
MAX_BUILD_SECONDS = 3600.0
"""The longest allowance a worker may ask for one build."""

AGENT_PID_VARIABLE = "SIXDIM_AGENT_PID"
"""The agent's PID, given to the worker so that it knows whose child it must stay."""

OPEN_FILES_VARIABLE = "SIXDIM_OPEN_FILES_SOFT_LIMIT"
"""The soft open-file limit the daemon started with, before it raised its own to the hard limit: a worker
sets it back, so that the programs a case runs get the limit the host gives them (a program using ``select()``
fails above 1,024 descriptors, and systemd's soft limit is 1,024 for that reason)."""

WORKER_MODULE = "sixdim.run.worker"
"""What the runner starts: ``python -m WORKER_MODULE REQUEST.json RESULTS.jsonl``."""
