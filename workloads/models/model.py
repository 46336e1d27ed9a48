"""Model workloads: whole training steps (or inference) of five reference models, on synthetic data.

Models: ResNet-50 (written here; torchvision's is used at full size when it is installed),
BERT-large encoder layers, a DLRM-style recommender (embeddings, bottom MLP, dot
interactions, top MLP), a GPT-style decoder (causal self-attention) and an LSTM sequence
classifier.  ``size`` ``full`` is the published architecture; ``small`` keeps the structure
at a size a CPU runs in seconds.

Measured as DeepSpark prescribes: the data is made on the device before anything is timed,
warm-up steps are discarded, then 5 steady-state windows of ``steps_per_window`` steps are
timed.  Samples per second follows the DeepSpark rule over the windows (drop the fastest and
slowest, average the middle 3).  Power comes from a power phase of ``power_seconds`` of further
steps after the windows (energy counter read at both ends), with samples per joule; memory is
the case's own allocator peak over the measured steps, taken afresh after the warm-up (a settle step at
least: :func:`settle_memory`).  ``fp32`` means IEEE float32 (TF32 off for matmuls and cuDNN);
``amp`` adds autocast to that.  Inference mode times forward passes at a small batch and adds
p50/p99 latency.

Imports torch: the worker process only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from sixdim.collectors.host import cpu_features
from sixdim.workloads.context import RunContext, WorkloadOutput
from sixdim.workloads.measure import flags
from sixdim.workloads.measure.report import percentile
from sixdim.workloads.measure.stats import deepspark_mean, summarize
from sixdim.workloads.measure.timing import note_memory, power_phase, settle_peak

# ----------------------------------------------------------------------------- ResNet-50


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inputs: int, width: int, stride: int):
        super().__init__()
        out = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(inputs, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.shortcut = (nn.Sequential(nn.Conv2d(inputs, out, 1, stride, bias=False), nn.BatchNorm2d(out))
                         if stride != 1 or inputs != out else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + self.shortcut(x))


class ResNet50(nn.Module):
    """ResNet-50 v1.5 (stride on the 3×3 convolution): stages of 3, 4, 6 and 3 bottlenecks."""

    def __init__(self, classes: int = 1000, base_width: int = 64):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, base_width, 7, 2, 3, bias=False), nn.BatchNorm2d(base_width),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        blocks, inputs = [], base_width
        for stage, (count, stride) in enumerate(zip((3, 4, 6, 3), (1, 2, 2, 2))):
            width = base_width * 2 ** stage
            for i in range(count):
                blocks.append(Bottleneck(inputs, width, stride if i == 0 else 1))
                inputs = width * Bottleneck.expansion
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(inputs, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


# ----------------------------------------------------------------------------- transformers, DLRM, LSTM


class Encoder(nn.Module):
    """BERT-style encoder layers (post-norm, GELU) with a token embedding and an output head."""

    def __init__(self, vocab: int, d_model: int, heads: int, ff: int, layers: int, causal: bool):
        super().__init__()
        self.causal = causal
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.1, activation="gelu", batch_first=True,
                                           norm_first=causal)  # GPT uses pre-norm, BERT post-norm
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device) \
            if self.causal else None
        return self.head(self.layers(x, mask=mask, is_causal=self.causal))


class DLRM(nn.Module):
    """DLRM-style: dense features through a bottom MLP, sparse features through embeddings, pairwise dot
    interactions, then a top MLP to one click logit."""

    def __init__(self, tables: int, rows: int, dim: int, dense: int, bottom: list[int], top: list[int]):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        self.bottom = _mlp([dense] + bottom + [dim])
        pairs = (tables + 1) * tables // 2
        self.top = _mlp([dim + pairs] + top + [1])

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        features = torch.stack([x] + [bag(sparse[:, i:i + 1]) for i, bag in enumerate(self.embeddings)], dim=1)
        interactions = features @ features.transpose(1, 2)
        rows, cols = torch.triu_indices(features.shape[1], features.shape[1], offset=1)
        return self.top(torch.cat([x, interactions[:, rows, cols]], dim=1)).squeeze(1)


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class LSTMClassifier(nn.Module):
    def __init__(self, features: int, hidden: int, layers: int, classes: int):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x)[0][:, -1])


# ----------------------------------------------------------------------------- sizes and synthetic batches

SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "resnet50": {"full": {"batch": 64, "image": 224, "base_width": 64, "classes": 1000},
                 "small": {"batch": 4, "image": 32, "base_width": 8, "classes": 10}},
    "bert_large": {"full": {"batch": 32, "seq": 128, "d_model": 1024, "heads": 16, "ff": 4096, "layers": 24,
                            "vocab": 30522},
                   "small": {"batch": 4, "seq": 32, "d_model": 64, "heads": 4, "ff": 256, "layers": 2, "vocab": 1000}},
    "dlrm": {"full": {"batch": 2048, "tables": 26, "rows": 100000, "dim": 128, "dense": 13,
                      "bottom": [512, 256], "top": [1024, 1024, 512, 256]},
             "small": {"batch": 64, "tables": 8, "rows": 1000, "dim": 16, "dense": 13, "bottom": [32], "top": [64]}},
    "gpt": {"full": {"batch": 8, "seq": 1024, "d_model": 768, "heads": 12, "ff": 3072, "layers": 12, "vocab": 50257},
            "small": {"batch": 4, "seq": 32, "d_model": 64, "heads": 4, "ff": 256, "layers": 2, "vocab": 1000}},
    "lstm": {"full": {"batch": 64, "seq": 100, "features": 256, "hidden": 1024, "layers": 2, "classes": 10},
             "small": {"batch": 8, "seq": 20, "features": 16, "hidden": 64, "layers": 2, "classes": 10}},
}


def build(name: str, size: str, device: torch.device, batch: int, generator: torch.Generator
          ) -> tuple[nn.Module, tuple[torch.Tensor, ...], Callable[[Any, tuple[torch.Tensor, ...]], torch.Tensor]]:
    """The model, a synthetic batch on the device, and the loss of the model's output on that batch."""
    s = SIZES[name][size]

    def on(t: torch.Tensor) -> torch.Tensor:
        return t.to(device)

    if name == "resnet50":
        try:
            if size != "full":
                raise ImportError
            import torchvision

            model: nn.Module = torchvision.models.resnet50(num_classes=s["classes"])
        except ImportError:
            model = ResNet50(s["classes"], s["base_width"])
        inputs: tuple[torch.Tensor, ...] = (on(torch.randn(batch, 3, s["image"], s["image"], generator=generator)),
                  on(torch.randint(0, s["classes"], (batch,), generator=generator)))
        return model, inputs, lambda out, b: F.cross_entropy(out, b[1])
    if name in ("bert_large", "gpt"):
        model = Encoder(s["vocab"], s["d_model"], s["heads"], s["ff"], s["layers"], causal=name == "gpt")
        tokens = on(torch.randint(0, s["vocab"], (batch, s["seq"] + 1), generator=generator))
        return model, (tokens[:, :-1], tokens[:, 1:]), \
            lambda out, b: F.cross_entropy(out.reshape(-1, out.shape[-1]), b[1].reshape(-1))
    if name == "dlrm":
        model = DLRM(s["tables"], s["rows"], s["dim"], s["dense"], s["bottom"], s["top"])
        inputs = (on(torch.randn(batch, s["dense"], generator=generator)),
                  on(torch.randint(0, s["rows"], (batch, s["tables"]), generator=generator)),
                  on(torch.randint(0, 2, (batch,), generator=generator).float()))
        return model, inputs, lambda out, b: F.binary_cross_entropy_with_logits(out, b[2])
    model = LSTMClassifier(s["features"], s["hidden"], s["layers"], s["classes"])
    inputs = (on(torch.randn(batch, s["seq"], s["features"], generator=generator)),
              on(torch.randint(0, s["classes"], (batch,), generator=generator)))
    return model, inputs, lambda out, b: F.cross_entropy(out, b[1])


def _forward(model: nn.Module, name: str, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return model(batch[0], batch[1]) if name == "dlrm" else model(batch[0])


# ----------------------------------------------------------------------------- measuring


SEQUENCE_MODELS = ("bert_large", "gpt")
"""The models whose samples are sequences of tokens: their throughput is also given in tokens/s."""


@dataclass(frozen=True)
class TrainingStep:
    """One step of a model on its synthetic batch, and the autocast dtype it runs in (None without amp):
    a run that its precision fails says which dtype failed."""

    step: Callable[[], None]
    amp_dtype: str | None

    def __call__(self) -> None:
        self.step()


def training_step(params: dict[str, Any], device: torch.device, training: bool,
                  wrap: Callable[[nn.Module], nn.Module] | None = None) -> tuple[TrainingStep, int, nn.Module]:
    """A step of the model on its synthetic batch (training or inference), its batch size, and the model.

    ``wrap`` (DistributedDataParallel, for linearity) is applied to the model on its device.
    """
    name, size = params["model"], params["size"]
    batch_size = params["batch"] or (SIZES[name][size]["batch"] if training else params["inference_batch"])
    generator = torch.Generator().manual_seed(params["seed"])
    torch.manual_seed(params["seed"])
    model, batch, loss_of = build(name, size, device, batch_size, generator)
    model = model.to(device)
    if wrap is not None:
        model = wrap(model)
    amp = params["precision"] == "amp"
    amp_dtype = torch.bfloat16 if device.type == "cpu" or torch.cuda.is_bf16_supported() else torch.float16
    scaler = torch.amp.GradScaler(device.type, enabled=amp and amp_dtype == torch.float16)
    optimizer = (torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if name == "resnet50"
                 else torch.optim.AdamW(model.parameters(), lr=1e-4)) if training else None
    model.train(training)

    def step() -> None:
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            if not training:
                with torch.no_grad():
                    _forward(model, name, batch)
                return
            loss = loss_of(_forward(model, name, batch), batch)
        assert optimizer is not None  # made when training
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return TrainingStep(step, str(amp_dtype).replace("torch.", "") if amp else None), batch_size, model


ONEDNN_NO_KERNEL = "could not create a primitive descriptor"
"""oneDNN's error where it has no kernel for an operator in the precision asked (an LSTM in bf16 on a CPU
without AVX-512-BF16 or AMX)."""


def cpu_precision_unsupported(exc: BaseException, device: torch.device, amp_dtype: str | None,
                              what: str) -> str | None:
    """The reason a case is ``unsupported`` rather than failed: bf16 asked of a CPU without bf16
    instructions, where oneDNN has no kernel for the operator.  None where that is not what happened (the
    CPU has them, or another error): then it is a failure."""
    if device.type != "cpu" or amp_dtype != "bfloat16" or ONEDNN_NO_KERNEL not in str(exc):
        return None
    features = cpu_features()
    if features.bf16_native:
        return None
    return (f"bf16 {what} has no oneDNN kernel here: {features.why_no_bf16()} "
            f"({features.model}: {', '.join(features.flags) or 'no AVX2'})")


def settle_memory(device: torch.device) -> None:
    """After the warm-up steps (one at least): give back what they freed and start the allocator's peak afresh,
    so the case's memory is that of the measured steps.

    The first steps are the cuDNN autotuner's: it tries each convolution algorithm with its own workspace,
    and those trial workspaces made ResNet-50 amp's peak 3,139 MiB against a hand loop's 3,076 MiB (H100).
    The model, its optimizer state and the batch stay allocated: the measured steps' peak still counts them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    settle_peak(device)


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    name, training = params["model"], params["mode"] == "training"
    flags.apply("fp32", cudnn_benchmark=True)  # amp = autocast on top of IEEE fp32, never TF32
    step, batch_size, model = training_step(params, device, training)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    ctx.progress(f"{name}: {params['warmup_steps']} warm-up steps")
    try:
        for _ in range(max(1, params["warmup_steps"])):  # one at least: an unsupported precision fails here
            step()
    except RuntimeError as exc:
        reason = cpu_precision_unsupported(exc, device, step.amp_dtype, name)
        if reason is None:
            raise
        return WorkloadOutput({}, {"amp_dtype": step.amp_dtype, "error": str(exc)[:400]},
                              status="unsupported", reason=reason)
    sync()
    settle_memory(device)
    steps = params["steps_per_window"]
    window_seconds: list[float] = []
    step_seconds: list[list[float]] = []
    ctx.mark_window_start()
    for w in range(params["windows"]):
        start = time.perf_counter()
        per_step = []
        for _ in range(steps):
            step_start = time.perf_counter()
            step()
            if device.type == "cpu":
                per_step.append(time.perf_counter() - step_start)
        sync()
        window_seconds.append(time.perf_counter() - start)
        step_seconds.append(per_step)
        ctx.progress(f"{name}: window {w + 1}/{params['windows']}: {batch_size * steps / window_seconds[-1]:.4g} "
                     f"samples/s")
    ctx.mark_window_end()
    note_memory(ctx)
    throughputs = [batch_size * steps / seconds for seconds in window_seconds]
    figures = {"samples_per_second": deepspark_mean(throughputs),
               "seconds": deepspark_mean([seconds / steps for seconds in window_seconds]),
               "seconds_iqr_ratio": summarize(window_seconds)["iqr_ratio"]}
    if name in SEQUENCE_MODELS:
        figures["tokens_per_second"] = figures["samples_per_second"] * SIZES[name][params["size"]]["seq"]
    details = {"batch": batch_size, "steps_per_window": steps, "window_seconds": window_seconds,
               "window_samples_per_second": throughputs, "parameters": sum(p.numel() for p in model.parameters()),
               "amp_dtype": step.amp_dtype}
    if device.type == "cpu":
        details["step_seconds"] = step_seconds
    power, power_details = power_phase(step, device, ctx, seconds=params.get("power_seconds", 0.0),
                                       seconds_per_unit=figures["seconds"], work_per_call=batch_size,
                                       work_unit="samples")
    figures.update(power)
    details.update(power_details)
    if not training and params["latency_samples"]:
        latencies = []
        for _ in range(params["latency_samples"]):
            start = time.perf_counter()
            step()
            sync()
            latencies.append(time.perf_counter() - start)
        figures["latency_p50_seconds"] = percentile(latencies, 50)
        figures["latency_p99_seconds"] = percentile(latencies, 99)
    if not all(math.isfinite(v) for v in figures.values()):
        return WorkloadOutput(figures, details, status="failed", reason="a non-finite figure (no time measured?)")
    return WorkloadOutput(figures, details)
