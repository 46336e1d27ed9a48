"""Benchmark workloads.  Importing this package never imports torch: see ``sixdim.workloads.registry``.

The top level holds the interface every workload shares and the daemon reads without torch (``registry``,
``spec``, ``context``); each kind of workload is a sub-package (``kernels``, ``models``, ``onnx``, ``logs``)
that uses the measuring machinery of ``measure`` and never another kind's modules (the import contracts in
pyproject.toml; docs/ARCHITECTURE.md)."""
