"""The golden matrix the launcher contract tests share: presets x models x node counts x tasks.

Each launcher's contract test renders every case it can run with `generate` (the real planner,
request and template) and hands the program argv to the framework's own argument rules. A case
the planner refuses (a model that does not fit) is reported by `cases()` as such, never dropped
silently: the tests count what they checked.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, Optional, Tuple

from slurmgpu.errors import ConfigError, PlanError, PolicyRejection
from slurmgpu.job import JobSpec, generate
from slurmgpu.job.generate import Generated
from slurmgpu.job.templates import search_path
from slurmgpu.site import load_site, preset_dir

# NVIDIA presets of several shapes (8-GPU HGX, 4-GPU GH200, 72-GPU NVL72) and one AMD site.
PRESETS = ("dgx-h100", "dgx-b200", "alps-gh200", "gb200-nvl72", "lumi-g")
TRAIN_MODELS = ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "mixtral-8x7b", "deepseek-v3")
SERVE_MODELS = ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "mixtral-8x7b", "deepseek-v3")
NODES = (1, 2, 8, 32)


@dataclass(frozen=True)
class Case:
    preset: str
    model: str
    nodes: int
    task: str  # pretrain | inference

    @property
    def id(self) -> str:
        return "%s-%s-%dn-%s" % (self.preset, self.model, self.nodes, self.task)


def matrix(task: str = "pretrain") -> Tuple[Case, ...]:
    models = TRAIN_MODELS if task == "pretrain" else SERVE_MODELS
    return tuple(Case(p, m, n, task) for p in PRESETS for m in models for n in NODES)


def render(case: Case, launcher: str, **spec: object) -> Optional[Generated]:
    """The generated job for a case, or None where the planner (rightly) refuses it."""
    site = load_site(str(preset_dir() / ("%s.yaml" % case.preset)))
    base = JobSpec(
        launcher=launcher,
        model=case.model,
        nodes=case.nodes,
        task=case.task,
        weights="org/model" if case.task != "pretrain" else None,
        time="04:00:00",
    )
    js = replace(base, **spec)  # type: ignore[arg-type]
    try:
        return generate(site, js, search_path(None, None, site))
    except (PlanError, PolicyRejection):
        return None
    except ConfigError:
        raise


def cases(launcher: str, task: str = "pretrain", **spec: object) -> Iterator[Tuple[Case, Optional[Generated]]]:
    for case in matrix(task):
        yield case, render(case, launcher, **spec)
