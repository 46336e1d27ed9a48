"""Benchmarks, simulations, demos and the GPU kit: tools for the next engineer, not tests.

pytest collects none of them (no ``test_`` names); each is run as ``python -m tests.bench.NAME``
(or ``tests/bench/gpu_kit.sh``), and docs/BENCHMARKS.md records what they measured.  Some tests
import their data builders (``report_bench.build_series``, ``scrape_bench.synthetic_history``).
"""
