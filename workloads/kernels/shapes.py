"""DeepBench's kernel shapes, as data (torch-free).

Source: baidu-research/DeepBench, ``code/kernels/{gemm,conv,rnn,sparse_gemm,all_reduce}_problems.h``
(the training and server-inference sets).  The sets are written here as groups
that share everything but the batch size, which is how DeepBench's lists are
built; ``tests/test_shapes.py`` checks the counts of each set against DeepBench's.

Each set also has a **quick** subset (a few representative shapes per kernel)
and every shape can be scaled down for the CPU (:func:`scale`), so CI runs each
code path in seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

# ----------------------------------------------------------------------------- GEMM

@dataclass(frozen=True)
class GemmShape:
    m: int
    n: int
    k: int
    op: str = "NN"  # "TN": A transposed; "NT": B transposed (DeepBench's a_t, b_t)
    mode: str = "training"

    @property
    def label(self) -> str:
        return f"m={self.m},n={self.n},k={self.k},op={self.op}"


def _gemm_training() -> list[GemmShape]:
    shapes: list[GemmShape] = []
    for op in ("NN", "TN"):
        shapes += [GemmShape(d, n, d, op) for d in (1760, 2048, 2560, 4096) for n in (16, 32, 64, 128, 7000)]
    shapes += [GemmShape(d, 7133, d, "NT") for d in (1760, 2048, 2560, 4096)]
    for op in ("NN", "TN"):
        shapes += [GemmShape(m, n, k, op) for k in (1760, 2048, 2560, 4096) for m, n in ((5124, 9124), (35, 8457))]
    for m, k in ((7680, 2560), (3072, 1024)):
        for op in ("NN", "TN"):
            shapes += [GemmShape(m, n, k, op) for n in (16, 32, 64, 128)]
    shapes += [GemmShape(3072, 7435, 1024, "NT"), GemmShape(7680, 5481, 2560, "NT")]
    for op in ("NN", "TN"):
        shapes += [GemmShape(m, n, 500000, op) for n in (8, 16) for m in (512, 1024)]
    shapes += [GemmShape(1024, 700, 512, "NN"), GemmShape(1024, 700, 512, "TN")]
    wide = ((7680, 2560), (6144, 2048), (4608, 1536), (8448, 2816), (3072, 1024))
    for op in ("NN", "TN"):
        shapes += [GemmShape(m, n, k, op) for n in (24000, 48000) for m, k in wide]
    for op in ("NN", "TN"):
        shapes += [GemmShape(m, n, k, op) for n in (16, 32) for m, k in ((6144, 2048), (4608, 1536), (8448, 2816))]
    for big_n, small_n in ((24000, 16), (48000, 32)):
        for op in ("NN", "TN"):
            shapes += [GemmShape(m, big_n, k, op) for m in (512, 1024) for k in (2816, 2048, 2560, 1536)]
            shapes += [GemmShape(m, small_n, 512, "NN" if op == "NN" else "NT") for m in (512, 1024)]
    return shapes


def _gemm_inference() -> list[GemmShape]:
    shapes = [GemmShape(m, n, k) for n in (700, 1500) for k in (2048, 2560) for m in (5124, 35)]
    shapes += [GemmShape(7680, n, 2560) for n in (1, 2, 4)] + [GemmShape(3072, n, 1024) for n in (1, 2, 4)]
    shapes += [GemmShape(m, n, 500000) for n in (1, 2, 4) for m in (512, 1024)]
    shapes += [GemmShape(1024, 700, 512)]
    wide = ((7680, 2560), (6144, 2048), (4608, 1536), (8448, 2816), (3072, 1024))
    shapes += [GemmShape(m, n, k) for n in (1500, 3000, 6000) for m, k in wide]
    shapes += [GemmShape(m, n, k) for n in (1, 2, 4) for m, k in ((6144, 2048), (4608, 1536), (8448, 2816))]
    for big_n, small_n in ((1500, 1), (3000, 2), (6000, 4)):
        shapes += [GemmShape(m, big_n, k) for m in (512, 1024) for k in (2816, 2048, 2560, 1536)]
        shapes += [GemmShape(m, small_n, 512) for m in (512, 1024)]
    return [replace(s, mode="inference") for s in shapes]


GEMM_TRAINING = _gemm_training()
GEMM_INFERENCE = _gemm_inference()
GEMM_SQUARE = [GemmShape(8192, 8192, 8192, "NN", mode="")]
"""The large square GEMM every GPU is judged by (fraction of peak)."""
GEMM_QUICK = [
    GemmShape(1760, 128, 1760, "NN"),
    GemmShape(5124, 9124, 2560, "TN"),
    GemmShape(2560, 7133, 2560, "NT"),
    GemmShape(5124, 700, 2048, "NN", mode="inference"),
    GemmShape(3072, 4, 1024, "NN", mode="inference"),
]


# ----------------------------------------------------------------------------- convolution

@dataclass(frozen=True)
class ConvShape:
    """DeepBench's NCHW convolution: input W×H×C, batch N, K filters of S (width) × R (height)."""

    w: int
    h: int
    c: int
    n: int
    k: int
    s: int
    r: int
    pad_w: int
    pad_h: int
    stride_w: int
    stride_h: int
    mode: str = "training"

    @property
    def label(self) -> str:
        return (f"w={self.w},h={self.h},c={self.c},n={self.n},k={self.k},s={self.s},r={self.r},"
                f"pad={self.pad_w}x{self.pad_h},stride={self.stride_w}x{self.stride_h}")


# Groups of "w h c k s r pad_w pad_h stride_w stride_h" lines that DeepBench repeats per batch size.
_CONV_GROUPS = {
    "speech_a": ["700 161 1 32 20 5 0 0 2 2", "341 79 32 32 10 5 0 0 2 2"],
    "speech_b": ["480 48 1 16 3 3 1 1 1 1", "240 24 16 32 3 3 1 1 1 1", "120 12 32 64 3 3 1 1 1 1",
                 "60 6 64 128 3 3 1 1 1 1"],
    "face": ["108 108 3 64 3 3 1 1 2 2", "54 54 64 64 3 3 1 1 1 1", "27 27 128 128 3 3 1 1 1 1",
             "14 14 128 256 3 3 1 1 1 1", "7 7 256 512 3 3 1 1 1 1"],
    "vgg": ["224 224 3 64 3 3 1 1 1 1", "112 112 64 128 3 3 1 1 1 1", "56 56 128 256 3 3 1 1 1 1",
            "28 28 256 512 3 3 1 1 1 1", "14 14 512 512 3 3 1 1 1 1", "7 7 512 512 3 3 1 1 1 1"],
    "inception": ["224 224 3 64 7 7 3 3 2 2", "28 28 192 32 5 5 2 2 1 1", "28 28 192 64 1 1 0 0 1 1",
                  "14 14 512 48 5 5 2 2 1 1", "14 14 512 192 1 1 0 0 1 1", "7 7 832 256 1 1 0 0 1 1",
                  "7 7 832 128 5 5 2 2 1 1"],
    "resnet_basic": ["56 56 64 64 3 3 1 1 1 1", "56 56 64 256 1 1 0 0 2 2", "28 28 128 128 3 3 1 1 1 1",
                     "28 28 128 512 1 1 0 0 2 2", "14 14 256 256 1 1 0 0 1 1", "14 14 256 256 3 3 1 1 1 1",
                     "14 14 256 1024 1 1 0 0 2 2", "7 7 512 512 1 1 0 0 1 1", "7 7 2048 512 1 1 3 3 2 2"],
    "speech_c": ["700 161 1 64 5 5 1 1 2 2", "350 80 64 64 3 3 1 1 1 1", "350 80 64 128 5 5 1 1 2 2",
                 "175 40 128 128 3 3 1 1 1 1", "175 40 128 256 5 5 1 1 2 2", "84 20 256 256 3 3 1 1 1 1",
                 "84 20 256 512 5 5 1 1 2 2", "42 10 512 512 3 3 1 1 1 1"],
    "resnet50": ["112 112 64 64 1 1 0 0 1 1", "56 56 64 256 1 1 0 0 1 1", "56 56 256 64 1 1 0 0 1 1",
                 "56 56 256 128 1 1 0 0 2 2", "28 28 128 512 1 1 0 0 1 1", "28 28 512 128 1 1 0 0 1 1",
                 "28 28 512 256 1 1 0 0 2 2", "14 14 256 1024 1 1 0 0 1 1", "28 28 512 1024 1 1 0 0 2 2",
                 "14 14 1024 256 1 1 0 0 1 1", "14 14 256 1024 1 1 0 0 1 1", "14 14 1024 512 1 1 0 0 2 2",
                 "7 7 512 512 3 3 1 1 1 1", "7 7 512 2048 1 1 0 0 1 1", "14 14 1024 2048 1 1 0 0 2 2",
                 "7 7 2048 512 1 1 0 0 1 1"],
}

_CONV_TRAINING_BATCHES = {"speech_a": (4, 8, 16, 32), "speech_b": (16,), "face": (8,), "vgg": (8, 16),
                          "inception": (16,), "resnet_basic": (8, 16), "speech_c": (16,), "resnet50": (8, 16)}
_CONV_INFERENCE_BATCHES = {"speech_a": (1, 2, 4), "speech_b": (1,), "face": (1,), "vgg": (1, 2),
                           "inception": (1, 2), "resnet_basic": (1, 2), "speech_c": (1, 2), "resnet50": (1, 2)}


def _conv_set(batches: dict[str, tuple[int, ...]], mode: str) -> list[ConvShape]:
    shapes = []
    for group, lines in _CONV_GROUPS.items():
        parsed = [tuple(int(v) for v in line.split()) for line in lines]
        if group == "speech_a":  # DeepBench lists each speech_a line across all its batches in turn
            order = [(p, n) for p in parsed for n in batches[group]]
        else:
            order = [(p, n) for n in batches[group] for p in parsed]
        for (w, h, c, k, s, r, pw, ph, sw, sh), n in order:
            shapes.append(ConvShape(w, h, c, n, k, s, r, pw, ph, sw, sh, mode))
    return shapes


CONV_TRAINING = _conv_set(_CONV_TRAINING_BATCHES, "training")
CONV_INFERENCE = _conv_set(_CONV_INFERENCE_BATCHES, "inference")
CONV_QUICK = [
    ConvShape(700, 161, 1, 16, 32, 20, 5, 0, 0, 2, 2),
    ConvShape(56, 56, 64, 16, 64, 3, 3, 1, 1, 1, 1),
    ConvShape(14, 14, 256, 16, 1024, 1, 1, 0, 0, 2, 2),
    ConvShape(224, 224, 3, 1, 64, 7, 7, 3, 3, 2, 2, "inference"),
]
CONV_SENTINEL = [CONV_QUICK[1]]
"""ResNet's 3x3 convolution at 56x56x64 from the quick set: the frequent tier's convolution."""


# ----------------------------------------------------------------------------- recurrent layers

@dataclass(frozen=True)
class RnnShape:
    hidden: int
    batch: int
    steps: int
    cell: str  # "vanilla" (ReLU), "lstm", "gru"
    mode: str = "training"

    @property
    def label(self) -> str:
        return f"cell={self.cell},hidden={self.hidden},batch={self.batch},steps={self.steps}"


def _rnn_training() -> list[RnnShape]:
    shapes = [RnnShape(h, b, 50, "vanilla") for h in (1760, 2048, 2560) for b in (16, 32, 64, 128)]
    shapes += [RnnShape(h, b, 25, "lstm") for h in (512, 1024, 2048, 4096) for b in (16, 32, 64, 128)]
    shapes += [RnnShape(1536, b, 50, "lstm") for b in (8, 16, 32)]
    shapes += [RnnShape(256, b, 150, "lstm") for b in (16, 32, 64)]
    shapes += [RnnShape(2816, 32, t, "gru") for t in (750, 375, 187)]
    shapes += [RnnShape(h, 32, t, "gru") for h in (2048, 1536, 2560) for t in (1500, 750, 375, 187)]
    shapes += [RnnShape(512, 32, 1, "gru"), RnnShape(1024, 32, 1500, "gru"), RnnShape(1024, 64, 1500, "gru")]
    return shapes


def _rnn_inference() -> list[RnnShape]:
    shapes = [RnnShape(h, b, 25, "lstm", "inference") for h in (512, 1024, 2048) for b in (1, 2, 4)]
    shapes += [RnnShape(1536, b, 50, "lstm", "inference") for b in (1, 2, 4)]
    shapes += [RnnShape(256, b, 150, "lstm", "inference") for b in (1, 2, 4)]
    shapes += [RnnShape(h, b, t, "gru", "inference") for h in (2816, 2048, 1536, 2560) for b in (1, 2, 4)
               for t in (1500, 750, 375, 187)]
    shapes += [RnnShape(512, b, 1, "gru", "inference") for b in (1, 2, 4)]
    shapes += [RnnShape(1024, b, 1500, "gru", "inference") for b in (1, 2, 4)]
    return shapes


RNN_TRAINING = _rnn_training()
RNN_INFERENCE = _rnn_inference()
RNN_QUICK = [RnnShape(1760, 32, 50, "vanilla"), RnnShape(1024, 64, 25, "lstm"), RnnShape(1536, 32, 187, "gru"),
             RnnShape(1024, 4, 25, "lstm", "inference")]
RNN_SENTINEL = [RNN_QUICK[1]]
"""One LSTM layer of the quick set (1024 hidden, batch 64, 25 steps): the frequent tier's recurrence."""


# ----------------------------------------------------------------------------- sparse GEMM

@dataclass(frozen=True)
class SparseShape:
    m: int
    n: int
    k: int
    sparsity: float
    mode: str = "inference"

    @property
    def label(self) -> str:
        return f"m={self.m},n={self.n},k={self.k},sparsity={self.sparsity:g}"


SPARSE_INFERENCE = [SparseShape(m, n, k, sparsity) for sparsity in (0.95, 0.9) for m, n, k in (
    (7680, 1, 2560), (7860, 2, 2560), (7860, 4, 2560), (7680, 1500, 2560), (7860, 3000, 2560), (7860, 6000, 2560),
    (10752, 1, 3584), (10752, 2, 3584), (10752, 4, 3584), (10752, 1500, 3584), (10752, 3000, 3584),
    (10752, 6000, 3584))]
SPARSE_QUICK = [SparseShape(7680, 1, 2560, 0.95), SparseShape(7680, 1500, 2560, 0.9)]


# ----------------------------------------------------------------------------- all-reduce

ALLREDUCE_FLOATS = [100000, 3097600, 4194304, 6553600, 16777217, 38360000, 64500000]
"""DeepBench's all-reduce sizes, in float32 elements."""
ALLREDUCE_QUICK = [4194304, 64500000]


# ----------------------------------------------------------------------------- scaling for the CPU

def scale(shape, factor: int):
    """The same kernel, smaller: every size divided by ``factor`` (at least 1); the batch, filter
    size, padding, stride, time steps and sparsity stay, so every code path is the same."""
    if factor <= 1:
        return shape
    down = lambda value: max(1, value // factor)  # noqa: E731
    if isinstance(shape, GemmShape):
        return replace(shape, m=down(shape.m), n=down(shape.n), k=down(shape.k))
    if isinstance(shape, ConvShape):
        w, h = max(shape.s, down(shape.w)), max(shape.r, down(shape.h))
        return replace(shape, w=w, h=h, c=max(1, down(shape.c)), k=max(1, down(shape.k)))
    if isinstance(shape, RnnShape):
        return replace(shape, hidden=max(8, down(shape.hidden)), steps=max(1, min(shape.steps, 25)))
    if isinstance(shape, SparseShape):
        return replace(shape, m=down(shape.m), n=max(1, down(shape.n) if shape.n > 4 else shape.n), k=down(shape.k))
    if isinstance(shape, int):
        return max(1024, shape // factor)
    raise TypeError(f"cannot scale {shape!r}")


def scaled(shapes: Iterable, factor: int) -> list:
    """Scaled shapes, without the duplicates scaling can make."""
    seen, result = set(), []
    for shape in (scale(s, factor) for s in shapes):
        if shape not in seen:
            seen.add(shape)
            result.append(shape)
    return result
