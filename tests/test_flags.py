"""Setting a case's flags costs nothing where deterministic mode stays as it is (issue 41, item 2).

``torch.use_deterministic_algorithms`` imports ``torch._inductor``: about 1 s in the first case of every
worker, and slower garbage collections after it, though no built-in workload but convergence's
deterministic option turns the mode on.  A fresh interpreter shows whether a case's flags import it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = """
import json, sys
from sixdim.workloads.measure import flags
flags.remember_defaults()
flags.apply("bf16", cudnn_benchmark=True)
flags.restore()
plain = "torch._inductor" in sys.modules
flags.apply("fp32", deterministic=True)
import torch, torch._inductor.config as inductor
on = (torch.are_deterministic_algorithms_enabled(), inductor.deterministic)
flags.restore()
off = (torch.are_deterministic_algorithms_enabled(), inductor.deterministic)
print(json.dumps({"plain": plain, "on": on, "off": off}))
"""


@pytest.mark.slow  # a fresh interpreter importing torch, then inductor: a few seconds
def test_flags_import_inductor_only_to_turn_deterministic_mode_on_and_back():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["plain"] is False  # a case that leaves the mode off never loads inductor
    assert seen["on"] == [True, True]  # turned on: torch's and inductor's flag both follow
    assert seen["off"] == [False, False]  # and back off after the case
