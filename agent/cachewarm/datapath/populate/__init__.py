"""The populator: verified data files -> destination memcached(s). `config` (what it is told), `worker`
(one file, in a pool process), `state` (what it remembers), `destinations` (restarts, evictions),
`loop` (the rounds, until DONE)."""

from cachewarm.datapath.encode import Mode
from cachewarm.datapath.populate.config import (
    PopulateConfig,
    PopulateError,
    WorkerParams,
    default_state_file,
    default_workers,
)
from cachewarm.datapath.populate.loop import PopulateSummary, Populator, Progress, populate, progress_printer
from cachewarm.datapath.populate.state import PopulateState

__all__ = [
    "Mode",
    "PopulateConfig",
    "PopulateError",
    "PopulateState",
    "PopulateSummary",
    "Populator",
    "Progress",
    "WorkerParams",
    "default_state_file",
    "default_workers",
    "populate",
    "progress_printer",
]
