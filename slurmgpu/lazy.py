"""Package faces that load a module only when one of its names is first used (PEP 562).

A face that imported its modules eagerly pulled a whole layer into every command that touched
one name of it; on a login node start-up time is a feature. Imports nothing of slurmgpu.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable, Dict, Mapping, Tuple


def face(package: str, exports: Mapping[str, Tuple[str, str]], namespace: Dict[str, Any]) -> Callable[[str], Any]:
    """The module `__getattr__` for `package`: name -> (module relative to it, name there)."""

    def __getattr__(name: str) -> Any:
        try:
            module, attr = exports[name]
        except KeyError:
            raise AttributeError("module %r has no attribute %r" % (package, name)) from None
        value = getattr(import_module(module, package), attr)
        namespace[name] = value  # later uses are plain attribute reads
        return value

    return __getattr__
