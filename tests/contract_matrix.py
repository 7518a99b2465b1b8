"""The matrix the launcher contract tests share: every site preset x every catalogue model, for
training and serving, at node counts sampled per pair.

Each launcher's contract test renders every case it can run with `generate` (the real planner,
request and template) and hands the program argv to the framework's own code or recorded rules.
A case the planner refuses (a model that does not fit) or the adapter refuses (a model the
framework cannot build, fp8 on a GPU without it) is counted by the tests with its reason, never
dropped silently.

The presets come from site-configs/ and the models from the catalogue, so a new preset or model
joins by itself. Node counts: the golden corner (five presets of different shapes x five models x
1, 2, 8, 32 nodes, the matrix the contract began with) plus one count per (preset, model) pair
drawn from NODE_CHOICES by a hash of the pair, so every pair is planned at some size without
the matrix growing as presets x models x sizes.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, replace
from typing import Dict, Iterator, Optional, Tuple

from slurmgpu.errors import ConfigError, PlanError, PolicyRejection
from slurmgpu.job import JobSpec, generate
from slurmgpu.job.generate import Generated
from slurmgpu.job.templates import search_path
from slurmgpu.plan.models import catalogue
from slurmgpu.site import load_site, preset_dir, preset_names

# the golden corner: NVIDIA presets of several shapes (8-GPU HGX, 4-GPU GH200, 72-GPU NVL72) and one AMD site
GOLDEN_PRESETS = ("dgx-h100", "dgx-b200", "alps-gh200", "gb200-nvl72", "lumi-g")
GOLDEN_MODELS = ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "mixtral-8x7b", "deepseek-v3")
NODES = (1, 2, 8, 32)
NODE_CHOICES = (1, 2, 4, 8, 16, 32, 64)

PRESETS: Tuple[str, ...] = tuple(preset_names())
MODELS: Tuple[str, ...] = tuple(m.name for m in catalogue())
# kept for the tests that name them
TRAIN_MODELS = MODELS
SERVE_MODELS = MODELS


@dataclass(frozen=True)
class Case:
    preset: str
    model: str
    nodes: int
    task: str  # pretrain | inference

    @property
    def id(self) -> str:
        return "%s-%s-%dn-%s" % (self.preset, self.model, self.nodes, self.task)


# a case every launcher plans (the first of the old golden matrix): for tests that need one
FIRST = Case("dgx-h100", "llama3.1-8b", 1, "pretrain")


def sampled_nodes(preset: str, model: str) -> int:
    """One node count for the pair, drawn by its hash from the choices that can hold the model's
    training state (about 16 bytes a parameter: bf16 weights and gradients, fp32 Adam states
    sharded) and the site allows, so most pairs are planned rather than refused."""
    site = _site(preset)
    part = site.partition(None)
    node = site.node_types[part.node_type]
    spec = next(m for m in catalogue() if m.name == model)
    need = 16 * spec.params / (node.gpus * node.gpu_memory_gb * 1e9 * 0.6)
    fits = [n for n in NODE_CHOICES if need <= n <= part.max_nodes_per_job] or [NODE_CHOICES[-1]]
    return fits[zlib.crc32(("%s/%s" % (preset, model)).encode()) % len(fits)]


@functools.cache
def matrix(task: str = "pretrain") -> Tuple[Case, ...]:
    cases = {Case(p, m, n, task) for p in GOLDEN_PRESETS for m in GOLDEN_MODELS for n in NODES}
    cases |= {Case(p, m, sampled_nodes(p, m), task) for p in PRESETS for m in MODELS}
    return tuple(sorted(cases, key=lambda c: (c.preset, c.model, c.nodes)))


def golden(task: str = "pretrain") -> Tuple[Case, ...]:
    return tuple(
        c for c in matrix(task) if c.preset in GOLDEN_PRESETS and c.model in GOLDEN_MODELS and c.nodes in NODES
    )


@functools.cache
def _site(preset: str):  # type: ignore[no-untyped-def]
    return load_site(str(preset_dir() / ("%s.yaml" % preset)))


def gpu_model(preset: str) -> str:
    site = _site(preset)
    return str(site.node_types[site.partition(None).node_type].gpu_model)


def render(case: Case, launcher: str, **spec: object) -> Optional[Generated]:
    """The generated job for a case, or None where the planner (rightly) refuses it."""
    site = _site(case.preset)
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


def count(counts: Dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1
