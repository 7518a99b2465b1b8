"""One exception hierarchy; the CLI maps each class to an exit code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional


class SlurmgpuError(Exception):
    """Base class: a problem the user can fix; printed without a traceback."""

    exit_code = 2


@dataclass(frozen=True)
class Issue:
    """One located problem: `file[:line[:col]]: field: message`.

    `file` is where the value came from (a file, or a flag such as --time); it is empty
    for a value checked after the spec and the flags were merged, and then only the field
    is printed. The field is never printed twice.
    """

    file: str
    line: Optional[int]
    col: Optional[int]
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if where and self.line is not None:
            where += ":%d" % self.line
            if self.col is not None:
                where += ":%d" % self.col
        parts = [p for p in (where, self.path) if p]
        if len(parts) == 2 and parts[0] == parts[1]:
            parts = parts[:1]
        return ": ".join(parts + [self.message])


class ConfigError(SlurmgpuError):
    """Invalid YAML input (site config, job spec, model file): all problems at once."""

    def __init__(self, issues: List[Issue]):
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class PlanError(SlurmgpuError):
    """The request cannot be planned (does not fit, breaks a hard rule)."""


class PolicyRejection(SlurmgpuError):
    """A job that the submit policy rejects; `check` exits 1 for it."""

    exit_code = 1


class TemplateError(SlurmgpuError):
    """A template could not be found or rendered."""


class SlurmError(SlurmgpuError):
    """A Slurm command failed or is missing."""


class Refused(SlurmgpuError):
    """An admin action refused for safety (a hand-written file in the way, no explicit site,
    a site that does not match the cluster); exit 1, nothing written."""

    exit_code = 1
