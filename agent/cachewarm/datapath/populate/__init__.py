"""The populator: verified data files -> destination memcached(s). `config` (what it is told), `worker`
(one file, in a pool process), `state` (what it remembers), `destinations` (what each can hold,
evictions), `restarts` (a destination that came back empty), `clocks` (the destinations' and the
source's clocks while it runs), `liveops` (add mode's re-check, decided up front), `volume` (the dump
directory as a remounted volume shows it), `finish` (applied against DONE, then judged), `report`
(the summary and the keys never sent), `loop` (the rounds, until DONE)."""

from cachewarm.datapath.encode import Mode
from cachewarm.datapath.populate.config import (
    DestinationUnreachable,
    DumpDataError,
    DumpTimeout,
    PopulateConfig,
    PopulateError,
    PopulateIncomplete,
    VolumeError,
    WorkerParams,
    default_state_file,
    default_workers,
)
from cachewarm.datapath.populate.loop import Populator, populate
from cachewarm.datapath.populate.report import PopulateSummary, Progress, progress_printer
from cachewarm.datapath.populate.state import PopulateState

__all__ = [
    "DestinationUnreachable",
    "DumpDataError",
    "DumpTimeout",
    "Mode",
    "PopulateConfig",
    "PopulateError",
    "PopulateIncomplete",
    "PopulateState",
    "PopulateSummary",
    "Populator",
    "Progress",
    "VolumeError",
    "WorkerParams",
    "default_state_file",
    "default_workers",
    "populate",
    "progress_printer",
]
