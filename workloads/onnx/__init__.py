"""The onnx workload: a model served by ONNX Runtime.  ``info`` and ``inputs`` are torch-free (the registry
checks a user's file with them); the rest runs in the worker.

The onnx workload serves sixdim's own models as well as a user's file; it exports them from the model
workload's definitions (``export``), the one place a kind reaches into another (allowed by name in
pyproject.toml's contract)."""

ONNX_MODELS = ("resnet50", "bert_large", "gpt")
"""sixdim's own models the onnx workload exports (exported by ``sixdim.workloads.onnx.export``, which imports torch).
Here, torch-free, so both the registry (checking a ``model`` parameter) and the workload read the one list."""
