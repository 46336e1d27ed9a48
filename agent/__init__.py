"""sixdim agent: schedules benchmark workloads and exports their results.

The package must stay importable without torch: the daemon (``sixdim serve``)
imports everything under ``agent`` and ``collectors``, and only the worker
child process ever imports torch.
"""

__version__ = "0.1.0"
