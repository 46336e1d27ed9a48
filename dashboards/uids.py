"""The dashboards' fixed uids, which are also their file names (``<uid>.json``): defined here, apart
from dashboards/build.py, so that the command line can name them without importing grafanalib."""

from __future__ import annotations

FLEET, GPU_DETAIL, VERSIONS, SCALING, CORRECTNESS, AGENT = (
    "sixdim-fleet", "sixdim-gpu", "sixdim-versions", "sixdim-scaling", "sixdim-correctness", "sixdim-agent")
UIDS = (FLEET, GPU_DETAIL, VERSIONS, SCALING, CORRECTNESS, AGENT)
"""Every dashboard's uid, in the order they are written and listed."""
