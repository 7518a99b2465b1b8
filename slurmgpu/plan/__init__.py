"""Pure planning: model + site -> parallel layout, memory and cost; no I/O, no script, no Lua."""

from __future__ import annotations

from .diagram import render
from .hardware import hardware
from .layout import Layout, tp_group_nodes
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
from .types import PlanRequest

__all__ = [
    "Layout",
    "ModelSpec",
    "PlanRequest",
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
    "render",
    "segment_error",
    "segment_for",
    "stage_layers",
    "tp_group_nodes",
    "training_memory",
    "usable_gb",
]
