"""Record a serving engine's command-line flags as data (tests/data/contract/<engine>-<version>.json).

vLLM and SGLang drag their own torch/CUDA stack, so CI never installs them; this recorder runs once
per pin, in a throwaway virtual environment outside the repository, against an unpacked wheel or
source snapshot, and writes facts only: option names, dest, action kind, type, choices, nargs.
The rules the adapters rely on (tests/data/contract/<engine>_rules.json) are written by hand from
the same snapshot, with file names.

    python contrib/contract/record_serving_args.py sglang /path/to/snapshot > tests/data/contract/sglang-0.5.23.json
    python contrib/contract/record_serving_args.py vllm /path/to/snapshot > tests/data/contract/vllm-0.33.0.json

The snapshot directory holds the `vllm/` or `sglang/` package (e.g. an unzipped wheel).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List


def _sglang_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser


def _vllm_parser() -> argparse.ArgumentParser:
    from vllm.entrypoints.cli.serve import ServeSubcommand  # type: ignore[import-not-found]
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

    top = FlexibleArgumentParser()
    sub = top.add_subparsers()
    parser: argparse.ArgumentParser = ServeSubcommand().subparser_init(sub)
    return parser


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "store_true"
    if isinstance(action, argparse._StoreFalseAction):
        return "store_false"
    if isinstance(action, argparse.BooleanOptionalAction):
        return "bool_optional"
    if isinstance(action, (argparse._StoreConstAction, argparse._AppendConstAction, argparse._CountAction)):
        return "const"
    if isinstance(action, argparse._AppendAction):
        return "append"
    return "value"


def _type_name(action: argparse.Action) -> str:
    t = action.type
    if t in (int, float, str):
        return t.__name__  # type: ignore[union-attr]
    return "str"  # custom converters (JSON, sizes, Optional parsers) accept a string here


def record(parser: argparse.ArgumentParser) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        row: Dict[str, Any] = {"names": list(a.option_strings), "dest": a.dest, "kind": _kind(a)}
        if row["kind"] in ("value", "append"):
            row["type"] = _type_name(a)
            if a.choices is not None:
                row["choices"] = sorted(str(c) for c in a.choices)
            if a.nargs is not None:
                row["nargs"] = a.nargs
        out.append(row)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine", choices=("vllm", "sglang"))
    ap.add_argument("snapshot", help="directory holding the engine's package (unzipped wheel or source tree)")
    ap.add_argument("--source", default="", help="what the snapshot is (wheel name, commit), written as `source`")
    ns = ap.parse_args()
    sys.path.insert(0, ns.snapshot)
    parser = _vllm_parser() if ns.engine == "vllm" else _sglang_parser()
    if ns.engine == "vllm":
        from vllm import __version__ as version  # type: ignore[import-not-found]
    else:
        from sglang.version import __version__ as version  # type: ignore[import-not-found]
    json.dump(
        {"engine": ns.engine, "version": version, "source": ns.source, "flags": record(parser)},
        sys.stdout,
        indent=1,
        sort_keys=True,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
