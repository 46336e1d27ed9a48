"""Wires the agent's parts together from a configuration (shared by ``serve`` and ``run``)."""

from __future__ import annotations

from dataclasses import dataclass

from sixdim.collectors.host import HostCollector
from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import Config
from sixdim.http.board import Board
from sixdim.run.executor import Executor, GuardSettings
from sixdim.store.history import History
from sixdim.verdicts.detector import settings_from
from sixdim.verdicts.live import Verdicts


@dataclass
class Components:
    config: Config
    history: History
    board: Board
    nvml: NvmlCollector
    host: HostCollector
    executor: Executor


def build(config: Config, *, verdicts: bool = False, command: str = "sixdim serve",
          wait_for_devices: bool = True, nvml: NvmlCollector | None = None,
          restore_in_background: bool = False) -> Components:
    """The agent's parts; ``verdicts``: keep regression verdicts (the daemon), restored from the
    history in the background.  ``command`` names this process in the state directory's lock files
    and worker records; ``wait_for_devices`` False refuses a device another sixdim holds.  ``nvml``:
    one the caller already made (to check the configured devices before anything is created);
    ``restore_in_background``: the board is loaded from the history on a thread of its own, started by
    ``board.start_restore()`` (the daemon, once it listens: it answers at once and says
    ``sixdim_history_restored 0`` meanwhile)."""
    history = History(config.history)
    board = Board.from_history(history, Verdicts(settings_from(config)) if verdicts else None,
                               background=restore_in_background, start=False)
    nvml = nvml or NvmlCollector(config.hostname)
    host = HostCollector(config.hostname)
    executor = Executor(hostname=config.hostname, history=history, nvml=nvml, rapl=host.rapl,
                        on_recorded=board.catch_up, sample_hz=config.sample_hz,
                        guard=GuardSettings(config.guard_enabled, config.guard_max_utilization),
                        state_dir=config.state_dir, command=command, wait_for_devices=wait_for_devices)
    return Components(config, history, board, nvml, host, executor)
