"""Wires the agent's parts together from a configuration (shared by ``serve`` and ``run``)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.board import Board
from agent.config import Config, regression_settings
from agent.executor import Executor, GuardSettings
from agent.history import History
from agent.verdicts import Verdicts
from collectors.host import HostCollector
from collectors.nvml import NvmlCollector


@dataclass
class Components:
    config: Config
    history: History
    board: Board
    nvml: NvmlCollector
    host: HostCollector
    executor: Executor


def build(config: Config, *, verdicts: bool = False) -> Components:
    """The agent's parts; ``verdicts``: keep regression verdicts (the daemon), restored from the
    history in the background."""
    history = History(config.history)
    board = Board.from_history(history, Verdicts(regression_settings(config)) if verdicts else None)
    nvml = NvmlCollector(config.hostname)
    host = HostCollector(config.hostname)
    executor = Executor(hostname=config.hostname, history=history, board=board, nvml=nvml, rapl=host.rapl,
                        sample_hz=config.sample_hz,
                        guard=GuardSettings(config.guard_enabled, config.guard_max_utilization))
    return Components(config, history, board, nvml, host, executor)
