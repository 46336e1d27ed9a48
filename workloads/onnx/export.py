"""sixdim's own models as ONNX files: exported once, on first use, into a cache, then reused.

The models are the model workload's (:mod:`sixdim.workloads.models.model`: ResNet-50, BERT-large encoder
layers, the GPT-style decoder) at its sizes (``small`` on CPUs), so the ``onnx`` workload runs with
nothing downloaded. Each is wrapped as a server runs it (:class:`Serving`): ResNet-50 returns its
class logits; BERT the classifier logits of its first token (the ``[CLS]`` position) and GPT the
next-token logits of its last position, so a batch of 128 × 1024 tokens does not copy 26 GB of
per-position vocabulary logits back to the host on every request.

**Exporter.** ``torch.onnx.export(..., dynamo=True)`` (torch.export, translated by onnxscript),
with the batch (and the sequence length of the transformers) as dynamic dimensions named
``batch`` and ``seq``. The legacy TorchScript exporter (``dynamo=False``, deprecated since
torch 2.9) needs no onnxscript, but with torch 2.13 it traces ``nn.MultiheadAttention``'s
reshapes with the example's sizes as constants: the exported BERT and GPT then fail (or worse)
at any other batch or length. The dynamo exporter keeps them symbolic; it runs offline and
needs ``onnxscript`` and ``onnx``, which the ``onnx`` extra pins.

**Cache.** One folder per key under :func:`default_cache_dir` (``$XDG_CACHE_HOME/sixdim/onnx``,
else ``~/.cache/sixdim/onnx``; the ``cache_dir`` parameter overrides it). The key hashes all that
decides the file's content: the model, its size's architecture (widths, depths, vocabulary, image
size; for ResNet-50 at full size, torchvision's version or sixdim's own), the export precision,
the opset, the weights' seed, the torch and onnxscript versions and :data:`EXPORT_FORMAT`; so a
stale export is never reused. The batch and sequence length are not in it: they are dynamic. An
export is written into a temporary folder beside its final one and renamed into place (atomic on
one filesystem): a reader sees a whole model or none, and two workers exporting at once both end
with one complete folder.

Imports torch: the worker process only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn as nn

from sixdim.workloads.models import model as models

EXPORT_FORMAT = 1
"""Bump when what is exported changes (the :class:`Serving` wrapper, input or dimension names)."""
MODEL_FILE = "model.onnx"
KEY_FILE = "key.json"
STALE_TEMPORARY_SECONDS = 24 * 3600
"""A temporary export folder older than this was left by a killed export: removed."""
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/sixdim/onnx``, else ``~/.cache/sixdim/onnx`` (the systemd unit's home and
    the Kubernetes DaemonSet's ``XDG_CACHE_HOME`` are writable, so both land somewhere kept)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sixdim" / "onnx"


class Serving(nn.Module):
    """The model as a server runs it: one output, the logits a client reads (see the module's docstring)."""

    def __init__(self, name: str, model: nn.Module):
        super().__init__()
        self.name, self.model = name, model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.name == "resnet50":
            return self.model(x)
        encoder = cast(models.Encoder, self.model)  # bert_large and gpt: the only other models served
        hidden = encoder.embed(x)
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device, dtype=hidden.dtype) \
            if encoder.causal else None
        hidden = encoder.layers(hidden, mask=mask, is_causal=encoder.causal)
        return encoder.head(hidden[:, -1] if encoder.causal else hidden[:, 0])


def serving_model(name: str, size: str, precision: str, seed: int) -> Serving:
    """The wrapped model on the CPU, in eval mode, its weights from ``seed`` (the same weights on
    every call with the same torch: the PyTorch reference and the export agree)."""
    torch.manual_seed(seed)
    model, _, _ = models.build(name, size, torch.device("cpu"), 1, torch.Generator().manual_seed(seed))
    return Serving(name, model).eval().to(DTYPES[precision])


def architecture(name: str, size: str) -> dict[str, Any]:
    """What decides the model's graph and weights at this size (the training batch does not)."""
    chosen = {k: v for k, v in models.SIZES[name][size].items() if k != "batch"}
    if name == "resnet50" and size == "full":  # models.build takes torchvision's ResNet-50 when it is installed
        chosen["implementation"] = f"torchvision {_version('torchvision')}" if _version("torchvision") else "sixdim"
    return chosen


def default_sequence_length(name: str, size: str) -> int:
    """The sequence length the model workload uses for a transformer at this size; 0 for ResNet-50."""
    return int(models.SIZES[name][size].get("seq", 0))


def example_input(name: str, size: str, precision: str, batch: int, sequence_length: int,
                  seed: int) -> torch.Tensor:
    """An input of the right kind (images, or token ids within the vocabulary) for tracing."""
    s = models.SIZES[name][size]
    generator = torch.Generator().manual_seed(seed)
    if name == "resnet50":
        return torch.randn(batch, 3, s["image"], s["image"], generator=generator).to(DTYPES[precision])
    return torch.randint(0, s["vocab"], (batch, sequence_length), generator=generator)


def cache_key(name: str, size: str, precision: str, opset: int, seed: int) -> dict[str, Any]:
    """Everything that decides an export's content (see the module's docstring)."""
    return {"format": EXPORT_FORMAT, "exporter": "torch.onnx.export(dynamo=True)", "model": name, "size": size,
            "architecture": architecture(name, size), "precision": precision, "opset": opset or "default",
            "seed": seed, "torch": torch.__version__, "onnxscript": _version("onnxscript")}


def folder_name(key: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return f"{key['model']}-{key['size']}-{key['precision']}-{digest}"


def exported(name: str, size: str, precision: str, *, seed: int = 0, opset: int = 0, cache_dir: str = "",
             progress: Callable[[str], None] = lambda message: None) -> tuple[Path, bool]:
    """The ONNX file of the model, exported now unless the cache has it; (path, whether it was exported now)."""
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    key = cache_key(name, size, precision, opset, seed)
    final = root / folder_name(key)
    if (final / MODEL_FILE).is_file():
        return final / MODEL_FILE, False
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(root)
    temporary = root / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    temporary.mkdir()
    try:
        progress(f"exporting {name} ({size}, {precision}) to ONNX, first use: cached in {final}")
        _export(name, size, precision, seed, opset, temporary / MODEL_FILE)
        (temporary / KEY_FILE).write_text(json.dumps(key, indent=2, sort_keys=True) + "\n")
        _fsync_folder(temporary)
        try:
            os.rename(temporary, final)
        except OSError:  # another worker renamed its export there first: theirs is complete, use it
            if not (final / MODEL_FILE).is_file():
                raise
        else:
            _fsync_folder(root)
            return final / MODEL_FILE, True
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return final / MODEL_FILE, False


def _export(name: str, size: str, precision: str, seed: int, opset: int, path: Path) -> None:
    model = serving_model(name, size, precision, seed)
    sequence = default_sequence_length(name, size)
    example = example_input(name, size, precision, 2, min(sequence, 16) or 0, seed)
    batch = torch.export.Dim("batch", min=1)
    dynamic = {0: batch} if name == "resnet50" else {0: batch, 1: torch.export.Dim("seq", min=2)}
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(None):
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (example,), str(path), dynamo=True, external_data=False, verbose=False,
                              input_names=["input"], output_names=["logits"], dynamic_shapes=(dynamic,),
                              opset_version=opset or None)
    finally:
        quiet.setLevel(level)
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def reference(name: str, size: str, precision: str, seed: int, inputs: Any) -> Any:
    """The model's float64 output in PyTorch on the CPU for ``inputs`` (a numpy array), from the
    same (precision-rounded) weights as the export: the correctness reference."""
    model = serving_model(name, size, precision, seed).double()
    tensor = torch.from_numpy(inputs)
    if tensor.is_floating_point():
        tensor = tensor.double()
    with torch.no_grad():
        return model(tensor).numpy()


def _version(distribution: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return ""


def _remove_stale_temporaries(root: Path) -> None:
    now = time.time()
    for entry in root.glob(".*.tmp-*"):
        with contextlib.suppress(OSError):
            if now - entry.stat().st_mtime > STALE_TEMPORARY_SECONDS:
                shutil.rmtree(entry, ignore_errors=True)


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
