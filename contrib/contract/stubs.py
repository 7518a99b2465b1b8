"""What the judge (contrib/contract/judge.py) stubs so the frameworks' own config code runs on a CPU.

Only what needs a GPU or a newer Python, nothing that decides a value the tests compare:

* TransformerEngine (`transformer_engine`): its import loads CUDA libraries. A stub package
  answers every attribute with a class that refuses to be instantiated ("needs a GPU"), so the
  modules that subclass or name TE classes import, and megatron-core sees TE as installed (as
  in the NeMo containers Bridge runs in): its version gates read TE_VERSION. No TE object is
  ever built (no model is instantiated).
* The GPU's CUDA/ROCm capability and name (`torch.cuda.get_device_capability`,
  `torch.cuda.get_device_properties`, torchtitan's has_cuda_capability / has_rocm_capability): the
  site's GPU, given per request (recipes pick e.g. DeepSeek-V3's MoE dispatcher by it).
* `typing.override` (Python 3.12): megatron-core 0.19 imports it; on 3.11 it is the identity
  decorator it is at run time on 3.12.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
import typing
from typing import Any, Optional, Tuple

TE_VERSION = "2.14.0"  # a TE 2.x as NeMo containers of Bridge 0.6.0's time ship; only version gates read it


def python_shims() -> None:
    if not hasattr(typing, "override"):
        typing.override = lambda f: f  # type: ignore[attr-defined]


class _StubMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        sub = _StubMeta(name, (_GpuOnly,), {"__module__": cls.__module__})
        setattr(cls, name, sub)
        return sub

    def __call__(cls, *a: Any, **k: Any) -> Any:
        raise RuntimeError("TransformerEngine stub: %s needs a GPU" % cls.__qualname__)


class _GpuOnly(metaclass=_StubMeta):
    def __init_subclass__(cls, **kw: Any) -> None:
        pass


class _FusedAdam:
    """transformer_engine.pytorch.optimizers.FusedAdam's keyword arguments (TE 2.x), nothing more."""

    def __init__(  # noqa: PLR0913
        self,
        params: Any,
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        set_grad_none: bool = True,
        capturable: bool = False,
        master_weights: bool = False,
        master_weight_dtype: Any = None,
        exp_avg_dtype: Any = None,
        exp_avg_sq_dtype: Any = None,
        use_decoupled_grad: bool = False,
        store_param_remainders: bool = False,
    ) -> None:
        raise RuntimeError("TransformerEngine stub: FusedAdam needs a GPU")


_REAL_SIGNATURES = {"transformer_engine.pytorch.optimizers": {"FusedAdam": _FusedAdam}}


def _module_getattr(modname: str) -> Any:
    def __getattr__(name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        full = modname + "." + name
        if full in sys.modules:
            return sys.modules[full]
        cls = _StubMeta(name, (_GpuOnly,), {"__module__": modname})
        setattr(sys.modules[modname], name, cls)
        return cls

    return __getattr__


class _TEFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    ROOT = "transformer_engine"

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname == self.ROOT or fullname.startswith(self.ROOT + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__getattr__ = _module_getattr(spec.name)  # type: ignore[method-assign]
        if spec.name == self.ROOT:
            m.__version__ = TE_VERSION  # type: ignore[attr-defined]
        for name, cls in _REAL_SIGNATURES.get(spec.name, {}).items():
            setattr(m, name, cls)
        return m

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def transformer_engine() -> None:
    if not any(isinstance(f, _TEFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TEFinder())


_CAPABILITY: Tuple[str, Tuple[int, int]] = ("nvidia", (9, 0))


def set_gpu(vendor: str, capability: Tuple[int, int], name: str = "", memory_gb: float = 80) -> None:
    """The GPU the frameworks ask about: NVIDIA SM (9, 0) for H100, AMD gfx9.4 as (9, 4) for MI300."""
    global _CAPABILITY
    _CAPABILITY = (vendor, (int(capability[0]), int(capability[1])))
    import torch

    props = types.SimpleNamespace(
        major=_CAPABILITY[1][0],
        minor=_CAPABILITY[1][1],
        name=name or ("NVIDIA" if vendor == "nvidia" else "AMD"),
        total_memory=int(memory_gb * 2**30),
        multi_processor_count=132,
    )
    torch.cuda.get_device_capability = lambda *a, **k: _CAPABILITY[1]  # type: ignore[assignment]
    torch.cuda.get_device_properties = lambda *a, **k: props  # type: ignore[assignment]


def has_cuda_capability(major: int, minor: int) -> bool:
    return _CAPABILITY[0] == "nvidia" and _CAPABILITY[1] >= (major, minor)


def has_rocm_capability(major: int, minor: int) -> bool:
    return _CAPABILITY[0] == "amd" and _CAPABILITY[1] >= (major, minor)
