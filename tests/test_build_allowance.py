"""A one-off build (a TensorRT engine kept in a cache) gets its own time instead of the case's timeout.

A real worker child and the real runner: the build announces itself through the context
(``RunContext.one_off_build``), the worker prints the protocol's build lines, the runner suspends the
case's timeout for the allowance and starts it afresh after the build.
"""

from __future__ import annotations

import pytest

from sixdim.run.protocol import MAX_BUILD_SECONDS
from sixdim.run.runner import _OutputReader, run_worker

ENTRY = "tests.fault_workloads:builds"


@pytest.mark.slow  # a real worker whose build outlasts the cases' 1.5 s timeout: about 3 s
def test_a_build_longer_than_the_cases_timeout_finishes_within_its_allowance():
    outcome = run_worker(ENTRY, [{"allowance": 20.0, "build_seconds": 2.5, "after": 0.2}], "cpu", 1.5,
                         uses_torch=False)
    assert outcome.status == "ok", (outcome.status, outcome.reason)
    assert [c.status for c in outcome.cases.values()] == ["ok"]


@pytest.mark.slow  # a real worker timed out 1.5 s after its build: about 2 s
def test_the_cases_timeout_starts_afresh_after_the_build():
    outcome = run_worker(ENTRY, [{"allowance": 20.0, "build_seconds": 0.5, "after": 4.0}], "cpu", 1.5,
                         uses_torch=False)
    assert outcome.status == "timeout" and not outcome.cases
    assert "within its timeout of 1.5 s" in outcome.reason, outcome.reason


def test_a_build_past_its_allowance_is_stopped_and_says_nothing_was_cached():
    outcome = run_worker(ENTRY, [{"allowance": 1.0, "build_seconds": 30.0}], "cpu", 60.0, uses_torch=False)
    assert outcome.status == "timeout" and not outcome.cases
    assert "did not finish building a test engine within the 1 s allowed" in outcome.reason, outcome.reason
    assert "the next run builds it again" in outcome.reason


class _Lines:
    def __init__(self, *lines: str):
        self.data = "".join(line + "\n" for line in lines).encode()

    def read1(self, size: int = -1) -> bytes:
        chunk, self.data = self.data[:size if size > 0 else None], self.data[size if size > 0 else len(self.data):]
        return chunk

    read = read1


def test_an_allowance_is_capped_and_a_malformed_one_ignored():
    reader = _OutputReader(_Lines("sixdim-build: start 99999 an engine"), None)
    reader.run()
    assert reader.build is not None and reader.build[1] == MAX_BUILD_SECONDS
    reader = _OutputReader(_Lines("sixdim-build: start soon an engine", "sixdim-build: start -5 x"), None)
    reader.run()
    assert reader.build_until is None and reader.build is None
