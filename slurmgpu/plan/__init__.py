"""Pure planning: model + site -> parallel layout, memory and cost; no I/O, no script, no Lua.

The names below load their module on first use (PEP 562), so importing one layer never
imports the rest of it: start-up time is a feature on a login node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import face

if TYPE_CHECKING:
    from .diagram import render
    from .hardware import hardware
    from .layout import Layout, node_shard, tp_group_nodes
    from .memory import (
        TrainShape,
        activation_bytes_per_layer,
        inference_memory,
        kv_cache_bytes,
        layer_act_base,
        model_states_bytes,
        stage_layers,
        training_memory,
        usable_gb,
    )
    from .models import ModelSpec, aliases_of, catalogue, fmt_params, get_model, load_model_file, model_from_params
    from .planner import make_plan
    from .report import format_plan
    from .rules import check_layout_rules, segment_error, segment_for
    from .types import Capabilities, PlanRequest

# A name that is also a submodule's name is bound now: once any sibling imported the
# submodule, the package attribute would otherwise be the module, not the function.
from .hardware import hardware  # noqa: E402

# exported name -> (module, name in it)
_EXPORTS = {
    "Layout": (".layout", "Layout"),
    "node_shard": (".layout", "node_shard"),
    "ModelSpec": (".models", "ModelSpec"),
    "PlanRequest": (".types", "PlanRequest"),
    "Capabilities": (".types", "Capabilities"),
    "TrainShape": (".memory", "TrainShape"),
    "activation_bytes_per_layer": (".memory", "activation_bytes_per_layer"),
    "aliases_of": (".models", "aliases_of"),
    "catalogue": (".models", "catalogue"),
    "check_layout_rules": (".rules", "check_layout_rules"),
    "fmt_params": (".models", "fmt_params"),
    "format_plan": (".report", "format_plan"),
    "get_model": (".models", "get_model"),
    "inference_memory": (".memory", "inference_memory"),
    "kv_cache_bytes": (".memory", "kv_cache_bytes"),
    "layer_act_base": (".memory", "layer_act_base"),
    "load_model_file": (".models", "load_model_file"),
    "make_plan": (".planner", "make_plan"),
    "model_from_params": (".models", "model_from_params"),
    "model_states_bytes": (".memory", "model_states_bytes"),
    "render": (".diagram", "render"),
    "segment_error": (".rules", "segment_error"),
    "segment_for": (".rules", "segment_for"),
    "stage_layers": (".memory", "stage_layers"),
    "tp_group_nodes": (".layout", "tp_group_nodes"),
    "training_memory": (".memory", "training_memory"),
    "usable_gb": (".memory", "usable_gb"),
}
__all__ = [
    "Layout",
    "ModelSpec",
    "PlanRequest",
    "Capabilities",
    "TrainShape",
    "activation_bytes_per_layer",
    "aliases_of",
    "catalogue",
    "check_layout_rules",
    "fmt_params",
    "format_plan",
    "get_model",
    "hardware",
    "inference_memory",
    "kv_cache_bytes",
    "layer_act_base",
    "load_model_file",
    "make_plan",
    "model_from_params",
    "model_states_bytes",
    "node_shard",
    "render",
    "segment_error",
    "segment_for",
    "stage_layers",
    "tp_group_nodes",
    "training_memory",
    "usable_gb",
]


__getattr__ = face(__name__, _EXPORTS, globals())
