"""Megatron-LM's argument rules from the recorded catalogue (tests/data/contract/megatron-d98e8a64.json).

Megatron's `megatron/training/arguments.py` is not installable from PyPI, so its parser is
recorded (contrib/contract/record_megatron.py, at the commit the catalogue names) and
rebuilt here as a real argparse parser with the recorded names, nargs, types and choices. The
recorded validate_args / TransformerConfig rules are then applied to the parsed namespace.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

CATALOGUE_PATH = Path(__file__).parent / "data" / "contract" / "megatron-d98e8a64.json"


class ArgvError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit; the test wants the reason
        raise ArgvError(message)


def _eval_int_expr(node: ast.AST) -> Any:
    """Lists and ints built with + and * only (Megatron's --moe-layer-freq pattern syntax)."""
    if isinstance(node, ast.Expression):
        return _eval_int_expr(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.List):
        return [_eval_int_expr(e) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        a, b = _eval_int_expr(node.left), _eval_int_expr(node.right)
        return a + b if isinstance(node.op, ast.Add) else a * b
    raise ValueError("not a layer pattern")


def moe_freq(text: str) -> Any:
    """An int N (one MoE layer every N) or a list pattern such as ([0]*3+[1]*58)."""
    if "[" in text:
        v = _eval_int_expr(ast.parse(text, mode="eval"))
        if not isinstance(v, list) or any(x not in (0, 1) for x in v):
            raise ValueError("pattern must be a list of 0/1")
        return v
    return int(text)


_TYPES: Dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str, "moe_freq_type": moe_freq}


@dataclass(frozen=True)
class Catalogue:
    data: Dict[str, Any]

    @property
    def commit(self) -> str:
        return str(self.data["commit"])

    @property
    def arguments(self) -> List[Dict[str, Any]]:
        return list(self.data["arguments"])

    @property
    def rules(self) -> List[Dict[str, str]]:
        return list(self.data["rules"])

    def flags(self) -> Dict[str, Dict[str, Any]]:
        return {f: a for a in self.arguments for f in a["flags"]}

    def parser(self) -> argparse.ArgumentParser:
        p = _Parser(allow_abbrev=False, add_help=False)
        for a in self.arguments:
            kw: Dict[str, Any] = {"dest": a["dest"], "default": a.get("default")}
            kind = a["kind"]
            if kind in ("store_true", "store_false", "count"):
                kw["action"] = kind
            elif kind == "boolean_optional":  # --x / --no-x: argparse makes the --no- form itself
                p.add_argument(a["flags"][0], action=argparse.BooleanOptionalAction, **kw)
                continue
            elif kind == "store_const":
                kw.update(action="store_const", const=a.get("const"))
            else:
                if kind == "append":
                    kw["action"] = "append"
                if "nargs" in a:
                    kw["nargs"] = a["nargs"]
                t = a.get("type")
                kw["type"] = _TYPES.get(t, str) if t else None
                if a.get("choices") is not None:
                    kw["choices"] = a["choices"]
            p.add_argument(*a["flags"], **kw)
        return p


def load() -> Catalogue:
    return Catalogue(json.loads(CATALOGUE_PATH.read_text()))


def _middle_ok(n: int, pp: int, first: Optional[int], last: Optional[int], vp: Optional[int]) -> bool:
    """Uneven stages: what is left after the first/last stage spreads evenly over the others."""
    for x in (first, last):
        if x is not None:
            if x <= 0 or (vp and vp > 1 and x % vp):
                return False
            n -= x
            pp -= 1
    if bool(n) != bool(pp):
        return False
    if pp and n % pp:
        return False
    return not (pp and vp and vp > 1 and (n // pp) % vp)


def layout_stages(text: str) -> List[str]:
    """--pipeline-model-parallel-layout: '|' separates stages, (x)*n and x*n repeat, ',' is cosmetic."""
    s = text.replace(",", "")
    s = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    s = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    return s.split("|")


def _layout_ok(text: str, n: int, pp: int) -> bool:
    stages = layout_stages(text)
    flat = "".join(stages)
    return (
        len(stages) % pp == 0
        and set(flat) <= set("ELtm")
        and flat.startswith("E")
        and flat.endswith("L")
        and flat.count("E") == 1
        and flat.count("L") == 1
        and flat.count("t") == n
    )


def check(cat: Catalogue, argv: Sequence[str], world_size: int) -> Tuple[argparse.Namespace, List[str]]:
    """Parse `argv` (Megatron's own arguments, entry point stripped) and apply the rules.

    Returns the namespace and the ids+sources of the rules it breaks; raises ArgvError for an
    argument Megatron's parser would refuse.
    """
    ns = cat.parser().parse_args(list(argv))
    env: Dict[str, Any] = dict(vars(ns))
    env["world_size"] = world_size
    env["_middle_ok"] = _middle_ok
    env["_layout_ok"] = _layout_ok
    safe = {"__builtins__": {"isinstance": isinstance, "list": list, "len": len}}
    broken = []
    for r in cat.rules:
        if eval(r["when"], safe, env) and not eval(r["require"], safe, env):  # noqa: S307 (our own data)
            broken.append("%s (%s)" % (r["id"], r["source"]))
    return ns, broken


def virtual_stages(ns: argparse.Namespace) -> int:
    """The interleaving degree Megatron derives from whichever spelling was used."""
    if ns.pipeline_model_parallel_layout:
        return len(layout_stages(ns.pipeline_model_parallel_layout)) // ns.pipeline_model_parallel_size
    if ns.num_virtual_stages_per_pipeline_rank:
        return int(ns.num_virtual_stages_per_pipeline_rank)
    if ns.num_layers_per_virtual_pipeline_stage:
        return ns.num_layers // ns.pipeline_model_parallel_size // ns.num_layers_per_virtual_pipeline_stage
    return 1


def stage_layers(ns: argparse.Namespace) -> List[int]:
    """Decoder layers per pipeline stage as Megatron would build them."""
    pp = ns.pipeline_model_parallel_size
    if ns.pipeline_model_parallel_layout:
        stages = layout_stages(ns.pipeline_model_parallel_layout)
        return [sum(stages[v * pp + r].count("t") for v in range(len(stages) // pp)) for r in range(pp)]
    first, last = ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers
    n, mid = ns.num_layers, pp
    if first is not None:
        n, mid = n - first, mid - 1
    if last is not None:
        n, mid = n - last, mid - 1
    out = [n // mid] * mid if mid else []
    if first is not None:
        out.insert(0, first)
    if last is not None:
        out.append(last)
    return out


def precision(ns: argparse.Namespace) -> str:
    if ns.fp8:
        return "fp8"
    if ns.bf16:
        return "bf16"
    if ns.fp16:
        return "fp16"
    return "fp32"
