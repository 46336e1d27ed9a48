"""Running workloads: the executor and scheduler, the worker child and its process safety, devices,
the idle guard and telemetry.  Only the worker (a child process) imports torch."""
