"""Which CPU a figure ran on, and precisions the CPU cannot run reported as unsupported (issue 32).

bf16 is native on x86 only with AVX-512-BF16 or AMX: without them oneDNN has no bf16 kernel for an LSTM
(``could not create a primitive descriptor``), and the case must be ``unsupported`` with the reason, not
``failed``.  ``ONEDNN_MAX_CPU_ISA=AVX2`` makes any x86 machine behave as an AVX2-only one for oneDNN, so
both paths run here whatever the CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from sixdim.collectors.host import cpu_features

EPYC_ROME = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B12
flags\t\t: fpu vme de pse tsc msr sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 bmi2
"""
SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_bf16 amx_int8
"""


def test_the_features_come_from_the_cpus_own_flags():
    rome = cpu_features(EPYC_ROME, environ={})
    assert rome.model == "AMD EPYC 7B12" and rome.flags == ("avx2", "fma")
    assert not rome.bf16_native and rome.why_no_bf16() == "the CPU has neither AVX-512-BF16 nor AMX"
    spr = cpu_features(SAPPHIRE_RAPIDS, environ={})
    assert spr.bf16_native and spr.why_no_bf16() == ""
    assert spr.flags == ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                         "amx_tile", "amx_bf16", "amx_int8")
    assert spr.environment() == {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "cpu_features": ",".join(spr.flags)}


def test_a_onednn_cap_below_bf16_makes_bf16_not_native_and_says_so():
    capped = cpu_features(SAPPHIRE_RAPIDS, environ={"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert not capped.bf16_native
    assert capped.why_no_bf16() == "oneDNN is limited to AVX2 by ONEDNN_MAX_CPU_ISA, below AVX-512-BF16 and AMX"
    assert capped.environment()["onednn_max_cpu_isa"] == "AVX2"
    assert cpu_features(SAPPHIRE_RAPIDS, environ={"ONEDNN_MAX_CPU_ISA": "avx512_core_bf16"}).bf16_native


def test_only_onednns_missing_bf16_kernel_on_a_cpu_without_bf16_is_unsupported(monkeypatch):
    from sixdim.workloads.models import model as models

    missing = RuntimeError("could not create a primitive descriptor for the LSTM forward propagation primitive.")
    cpu = torch.device("cpu")
    monkeypatch.setattr(models, "cpu_features", lambda: cpu_features(EPYC_ROME, environ={}))
    reason = models.cpu_precision_unsupported(missing, cpu, "bfloat16", "lstm")
    assert reason == ("bf16 lstm has no oneDNN kernel here: the CPU has neither AVX-512-BF16 nor AMX "
                      "(AMD EPYC 7B12: avx2, fma)")
    assert models.cpu_precision_unsupported(missing, cpu, None, "lstm") is None  # fp32 failing is a failure
    assert models.cpu_precision_unsupported(RuntimeError("out of memory"), cpu, "bfloat16", "lstm") is None
    assert models.cpu_precision_unsupported(missing, torch.device("cuda"), "bfloat16", "lstm") is None
    monkeypatch.setattr(models, "cpu_features", lambda: cpu_features(SAPPHIRE_RAPIDS, environ={}))
    assert models.cpu_precision_unsupported(missing, cpu, "bfloat16", "lstm") is None  # the CPU has it: a bug


CASE = """
import json, sys
from sixdim.workloads import registry
from sixdim.workloads.context import RunContext
from sixdim.workloads.models.model import run
[case] = [c for c in registry.get("model").cases({"models": ["lstm"], "modes": ["training"]}, "cpu")
          if c.precision == "amp"]
out = run(case.params, RunContext("cpu"))
print(json.dumps({"status": out.status, "reason": out.reason}))
"""


def _lstm_amp(**env: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CASE], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_bf16_lstm_is_unsupported_where_onednn_lacks_bf16_and_runs_where_it_has_it():
    capped = _lstm_amp(ONEDNN_MAX_CPU_ISA="AVX2")
    assert capped["status"] == "unsupported", capped
    assert "bf16 lstm has no oneDNN kernel here" in capped["reason"]
    here = _lstm_amp()
    features = cpu_features()
    if features.bf16_native:
        assert here["status"] == "ok", here
    else:
        assert here["status"] == "unsupported" and features.why_no_bf16() in here["reason"], here
