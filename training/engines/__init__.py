"""Training engines, registered by import path (docs/architecture.md "Plugins"), and ``engine=auto``.

An engine is a module with two functions:

- ``describe(cfg: TrainConfig) -> str``: the effective configuration it would run, as
  text (``dry_run=true`` prints it; the verl engine prints the complete veRL config);
- ``train(cfg: TrainConfig) -> dict``: run training and return a summary.

The registry stores module paths, not modules, so listing engines imports nothing heavy
and a worker in another process can import the same path.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Protocol

from tools.plugins import Registry


class EngineModule(Protocol):
    def describe(self, cfg: object) -> str: ...

    def train(self, cfg: object) -> dict: ...


ENGINES: Registry[str] = Registry("engine")


def register_engine(name: str, module_path: str) -> None:
    """Register ``name`` -> importable module path."""
    ENGINES.register(name)(module_path)


register_engine("local", "training.engines.local")
register_engine("verl", "training.engines.verl.launch")


def get_engine(name: str) -> EngineModule:
    """Import and return the engine module (``ValueError`` listing engines if unknown)."""
    module: ModuleType = importlib.import_module(ENGINES.get(name))
    return module


def resolve_engine(name: str) -> tuple[str, str]:
    """Map ``auto`` to a concrete engine; returns (engine, why).

    ``auto`` picks ``verl`` when CUDA GPUs and vLLM are present (veRL's rollouts need vLLM
    servers), else ``local``.
    """
    if name != "auto":
        ENGINES.get(name)  # unknown names fail here, listing the registered ones
        return name, f"engine={name} was requested"
    cuda = _cuda_devices()
    has_vllm = importlib.util.find_spec("vllm") is not None
    if cuda and has_vllm:
        return "verl", f"engine=auto: {cuda} CUDA GPU(s) and vLLM found -> verl"
    missing = "no CUDA GPU" if not cuda else "vLLM is not installed"
    return "local", f"engine=auto: {missing} -> local (HF transformers, single process)"


def _cuda_devices() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0
