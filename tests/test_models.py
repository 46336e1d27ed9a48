"""Model workloads on the CPU: every model trains and infers, and samples/s agrees with its own steps."""

import pytest
import torch

from sixdim.collectors.host import cpu_features
from sixdim.workloads import registry
from sixdim.workloads.context import RunContext
from sixdim.workloads.measure.stats import deepspark_mean
from sixdim.workloads.models.model import SEQUENCE_MODELS, SIZES, ResNet50, run


@pytest.mark.parametrize("model", ["resnet50", "bert_large", "dlrm", "gpt", "lstm"])
@pytest.mark.slow
def test_model_training_samples_per_second_matches_its_step_timing(model):
    features = cpu_features()
    for case in registry.get("model").cases({"models": [model], "modes": ["training"]}, "cpu"):
        ctx = RunContext("cpu")
        output = run(case.params, ctx)
        d = output.details
        if model == "lstm" and case.precision == "amp" and not features.bf16_native:
            # oneDNN has no bf16 LSTM without AVX-512-BF16 or AMX (issue 32): unsupported, saying why
            assert output.status == "unsupported" and features.why_no_bf16() in output.reason, output.reason
            continue
        assert output.status == "ok", output.reason
        # the figure follows from the window times by the DeepSpark rule
        expected = deepspark_mean([d["batch"] * d["steps_per_window"] / w for w in d["window_seconds"]])
        assert output.figures["samples_per_second"] == pytest.approx(expected)
        # and the windows are made of the steps timed one by one
        for window, steps in zip(d["window_seconds"], d["step_seconds"]):
            assert len(steps) == d["steps_per_window"]
            # each window spans its steps (no upper bound: a loaded machine may preempt between steps)
            assert sum(steps) <= window
        assert ctx.window_end - ctx.window_start >= sum(d["window_seconds"]) * 0.99
        assert d["amp_dtype"] == ("bfloat16" if case.precision == "amp" else None)
        # a sequence model's throughput in tokens: its samples times its sequence length, nothing else
        if model in SEQUENCE_MODELS:
            seq = SIZES[model][case.params["size"]]["seq"]
            assert output.figures["tokens_per_second"] == pytest.approx(output.figures["samples_per_second"] * seq)
        else:
            assert "tokens_per_second" not in output.figures


def test_inference_reports_latency_percentiles(monkeypatch):
    from sixdim.workloads.measure import report
    from sixdim.workloads.models import model as models

    asked = []

    def recording_percentile(values, q):  # the real one, with what it was asked noted
        value = report.percentile(values, q)
        asked.append((len(values), q, value))
        return value

    monkeypatch.setattr(models, "percentile", recording_percentile)
    [case] = registry.get("model").cases({"models": ["lstm"], "modes": ["inference"], "precisions": ["fp32"]}, "cpu")
    output = run(case.params, RunContext("cpu"))
    assert output.details["batch"] == 1
    assert 0 < output.figures["latency_p50_seconds"] <= output.figures["latency_p99_seconds"]
    # each figure is its own percentile of the single requests' times, all of them
    samples = case.params["latency_samples"]
    assert [(n, q) for n, q, _ in asked] == [(samples, 50), (samples, 99)]
    assert (output.figures["latency_p50_seconds"], output.figures["latency_p99_seconds"]) == (asked[0][2], asked[1][2])


def test_resnet50_has_resnet50s_parameter_count():
    # 25,557,032 parameters at full width with 1000 classes: the published ResNet-50 count
    assert sum(p.numel() for p in ResNet50(1000, 64).parameters()) == 25_557_032


def test_training_steps_learn():
    from sixdim.workloads.models.model import build

    model, batch, loss_of = build("lstm", "small", torch.device("cpu"), 8, torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = None
    for _ in range(30):
        loss = loss_of(model(batch[0]), batch)
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < first / 2  # the synthetic batch is memorised: the step really trains


def test_memory_is_settled_after_a_warm_up_step_and_before_the_measured_steps(monkeypatch):
    """The memory baseline of the measured steps comes after a settle step (issue 45, item 8): on a GPU the
    cuDNN autotuner's trial workspaces of the first steps would otherwise count in the case's peak.  On the
    CPU the order is what can be seen: at least one step, then the settle, then the measured window."""
    from sixdim.workloads.models import model as models

    events: list[str] = []
    build = models.training_step

    def counting_step(*args, **kwargs):  # the real step, each call noted
        step, batch, model = build(*args, **kwargs)

        def noted() -> None:
            events.append("step")
            step()

        noted.amp_dtype = step.amp_dtype  # type: ignore[attr-defined]
        return noted, batch, model

    settle = models.settle_memory

    def noted_settle(device: torch.device) -> None:
        events.append("settle")
        settle(device)

    class NotedContext(RunContext):
        def mark_window_start(self) -> None:
            events.append("window")
            super().mark_window_start()

    monkeypatch.setattr(models, "training_step", counting_step)
    monkeypatch.setattr(models, "settle_memory", noted_settle)
    [case] = registry.get("model").cases({"models": ["lstm"], "modes": ["inference"], "precisions": ["fp32"]}, "cpu")
    output = run({**case.params, "warmup_steps": 0, "windows": 3, "steps_per_window": 1, "latency_samples": 0},
                 NotedContext("cpu"))
    assert output.status == "ok", output.reason
    assert events.count("settle") == 1 and events.count("window") == 1, events
    settled, window = events.index("settle"), events.index("window")
    assert events[:settled] == ["step"], events  # warmup_steps = 0 still settles after one step
    assert settled < window and events[window + 1:] == ["step"] * 3, events
