"""Finished runs held against their plans: reading the frameworks' log lines, the site's runs
file, and fitting the site's efficiency to it (`slurmgpu report`, `slurmgpu calibrate`).

Sits above `plan` (it asks the planner), `site` (the runs and calibration files live with the
site) and `node` (doctor's log finding); only `cli` imports it. Lazy face, as every layer's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import face

if TYPE_CHECKING:
    from .calibrate import calibrate
    from .logs import FORMATS, read_all
    from .record import append_run, read_runs, record_of
    from .report import RunReport, report_target

_EXPORTS = {
    "FORMATS": (".logs", "FORMATS"),
    "RunReport": (".report", "RunReport"),
    "append_run": (".record", "append_run"),
    "calibrate": (".calibrate", "calibrate"),
    "read_all": (".logs", "read_all"),
    "read_runs": (".record", "read_runs"),
    "record_of": (".record", "record_of"),
    "report_target": (".report", "report_target"),
}
__all__ = [
    "FORMATS",
    "RunReport",
    "append_run",
    "calibrate",
    "read_all",
    "read_runs",
    "record_of",
    "report_target",
]

__getattr__ = face(__name__, _EXPORTS, globals())
