"""The node checks behind ``python -m training.preflight`` (``training/preflight.py``): is this
node ready for the run? Each check gives ``OK`` / ``FAIL`` / ``SKIP`` with what to fix.

:func:`gather_facts` reads the machine (torch's CUDA build and devices, the driver from
``nvidia-smi``, installed versions and the pins of the project's ``gpu``/``flash`` extras,
the model's ``config.json`` and tokenizer from local files only, the run directory's
filesystem); :func:`run_checks` judges a facts dict, so every check is testable with a
dict shaped like the real one. Nothing is downloaded: a hub model that is not in the local
cache is reported SKIP with the command that fetches it.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.engines.verl.checks.backbones import BACKBONES, Architecture
from training.runs.resume_policy import LOCAL_ONLY_PREFIXES, SHARED_FILESYSTEMS

# Oldest Linux driver per CUDA major (CUDA release notes, "minor version compatibility").
MIN_DRIVER = {"11": "450.80.02", "12": "525.60.13", "13": "580.65.06"}
MEMORY_SLACK = 0.97  # a device may report a little less than the group's figure
FIELDS = ("max_position_embeddings", "num_attention_heads", "num_key_value_heads", "vocab_size")


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK | FAIL | SKIP
    detail: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.name}: {self.detail}"


@dataclass(frozen=True)
class Context:
    """What the run asks of the node (from the project config)."""

    model: str
    hardware: str
    gpus_per_node: int | None
    gpu_memory_gib: float | None
    nnodes: int
    attention: str
    run_dir: str


def context_of(cfg: Any) -> Context:
    from training.engines.verl.checks.sizing_table import sizing_for
    from training.engines.verl.config.translate import policy_path

    model = policy_path(cfg)
    row = sizing_for(cfg.hardware, cfg.model.path or cfg.gpu_backbone or "")
    attention = (row.attn_implementation if row else None) or cfg.model.attn_implementation
    hw = cfg.hardware
    return Context(model, hw.name, hw.gpus_per_node, hw.gpu_memory_gib, hw.nnodes, attention, cfg.run_dir)


# ----------------------------------------------------------------------------- gathering (the real machine)


def gather_facts(ctx: Context) -> dict[str, Any]:
    return {
        "torch": _torch_facts(),
        "driver": _driver_version(),
        "packages": {
            name: _version(dist)
            for name, dist in (("torch", "torch"), ("verl", "verl"), ("vllm", "vllm"), ("flash_attn", "flash-attn"))
        },
        "pins": _pins(),
        "model_config": _model_config(ctx.model),
        "chat": _chat_renders(ctx.model),
        "run_dir_fs": _filesystem(ctx.run_dir),
    }


def _torch_facts() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda, "devices": []}
    try:
        out["cuda_available"] = torch.cuda.is_available()
        for i in range(torch.cuda.device_count() if out["cuda_available"] else 0):
            p = torch.cuda.get_device_properties(i)
            out["devices"].append(
                {"name": p.name, "total_memory": int(p.total_memory), "major": p.major, "minor": p.minor}
            )
    except RuntimeError as err:  # a driver/runtime mismatch surfaces here
        out["cuda_available"], out["error"] = False, str(err)
    return out


def _driver_version() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _pins() -> dict[str, str | None]:
    """``==`` pins of veRL (the project's gpu extra), vLLM (veRL's vllm extra) and flash-attn
    (the project's flash extra), read from installed metadata."""
    from packaging.requirements import Requirement

    pins: dict[str, str | None] = {"verl": None, "vllm": None, "flash_attn": None}
    for dist, extra, names in (
        ("sqlagent-rl", "gpu", ("verl",)),
        ("sqlagent-rl", "flash", ("flash-attn",)),
        ("verl", "vllm", ("vllm",)),
    ):
        try:
            reqs = importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in reqs:
            req = Requirement(text)
            if req.name in names and req.marker is not None and req.marker.evaluate({"extra": extra}):
                exact = [s.version for s in req.specifier if s.operator == "=="]
                pins[req.name.replace("-", "_")] = exact[0] if exact else None
    return pins


def _local_dir(model: str) -> Path | None:
    """A local directory holding ``model``: the path itself, or the hub cache's snapshot."""
    if Path(model).is_dir():
        return Path(model)
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001  (not a hub name)
        return None
    return Path(hit).parent if isinstance(hit, str) else None


def _model_config(model: str) -> dict[str, Any]:
    import json

    where = _local_dir(model)
    if where is None or not (where / "config.json").is_file():
        return {
            "where": None,
            "why": f"{model} has no config.json on this machine "
            f"(fetch it: huggingface-cli download {model} config.json)",
        }
    return {"where": str(where), "config": json.loads((where / "config.json").read_text())}


def _chat_renders(model: str) -> dict[str, Any]:
    from training.engines.verl.checks.chat_golden import CONVERSATION, GOLDEN

    where = _local_dir(model)
    if where is None:
        return {"why": f"no local tokenizer for {model} (fetch it: huggingface-cli download {model})"}
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(where))
    renders = {
        key: tokenizer.apply_chat_template(
            list(CONVERSATION), tokenize=False, add_generation_prompt=True, enable_thinking=key.endswith("True")
        )
        for key in next(iter(GOLDEN.values()))
    }
    return {"template": tokenizer.chat_template or "", "renders": renders}


def _filesystem(path: str) -> dict[str, Any]:
    """The mount holding ``path`` (the launch's own lookup, ``training.runs.resume_policy.mount_of``)."""
    from training.runs.resume_policy import mount_of

    resolved = Path(path).resolve()
    mount, fstype = mount_of(resolved)
    return {"path": str(resolved), "mount": mount or "/", "fstype": fstype}


# ----------------------------------------------------------------------------- checks (facts -> verdicts)


def check_cuda(facts: dict[str, Any], ctx: Context) -> Check:
    torch = facts["torch"]
    if not torch.get("cuda"):
        return Check(
            "cuda runtime",
            "FAIL",
            f"torch {torch['version']} is a CPU build: install the GPU stack "
            "(pip install -e '.[gpu]', which pins veRL's CUDA torch)",
        )
    if torch.get("error"):
        return Check("cuda runtime", "FAIL", f"torch {torch['version']} (CUDA {torch['cuda']}): {torch['error']}")
    return Check("cuda runtime", "OK", f"torch {torch['version']} built for CUDA {torch['cuda']}")


def check_driver(facts: dict[str, Any], ctx: Context) -> Check:
    cuda, driver = facts["torch"].get("cuda"), facts.get("driver")
    if not cuda:
        return Check("driver", "SKIP", "no CUDA torch to match a driver with")
    if not driver:
        return Check("driver", "FAIL", "no NVIDIA driver found (nvidia-smi missing or failing): install the driver")
    need = MIN_DRIVER.get(str(cuda).split(".")[0])
    if need and _tuple(driver) < _tuple(need):
        return Check(
            "driver",
            "FAIL",
            f"driver {driver} is older than CUDA {cuda} needs (>= {need}): update the "
            "driver, or install a torch built for an older CUDA",
        )
    return Check("driver", "OK", f"driver {driver} runs CUDA {cuda}" + ("" if need else " (no minimum on record)"))


def check_gpus(facts: dict[str, Any], ctx: Context) -> Check:
    devices = facts["torch"].get("devices") or []
    want = ctx.gpus_per_node
    if not devices:
        return Check("gpus", "FAIL", "no CUDA GPU visible (CUDA_VISIBLE_DEVICES? driver?)")
    if want is None:
        return Check(
            "gpus",
            "OK",
            f"{len(devices)} x {devices[0]['name']} (hardware=cpu asks for none: pass "
            "hardware=h100x8 | h200x8 | gpu1 to check the count)",
        )
    if len(devices) < want:
        return Check(
            "gpus",
            "FAIL",
            f"{len(devices)} GPU(s) visible, hardware={ctx.hardware} wants {want} per node: "
            f"run on a node with {want}, or hardware.gpus_per_node={len(devices)}",
        )
    return Check("gpus", "OK", f"{len(devices)} x {devices[0]['name']} (hardware={ctx.hardware} wants {want})")


def check_memory(facts: dict[str, Any], ctx: Context) -> Check:
    devices = facts["torch"].get("devices") or []
    if not devices:
        return Check("gpu memory", "SKIP", "no GPU to measure")
    if ctx.gpu_memory_gib is None:
        return Check("gpu memory", "SKIP", "hardware=cpu names no memory to check against")
    least = min(devices, key=lambda d: d["total_memory"])
    have = least["total_memory"] / 2**30
    if have < ctx.gpu_memory_gib * MEMORY_SLACK:
        return Check(
            "gpu memory",
            "FAIL",
            f"{least['name']} has {have:.1f} GiB, hardware={ctx.hardware} is sized for "
            f"{ctx.gpu_memory_gib} GiB: pick the hardware group of this GPU",
        )
    return Check("gpu memory", "OK", f"{have:.1f} GiB per GPU (hardware={ctx.hardware}: {ctx.gpu_memory_gib} GiB)")


def check_flash_attn(facts: dict[str, Any], ctx: Context) -> Check:
    have, pin = facts["packages"].get("flash_attn"), facts["pins"].get("flash_attn")
    if ctx.attention != "flash_attention_2":
        return Check("flash-attn", "SKIP", f"not asked for (attention {ctx.attention})")
    if not have:
        return Check(
            "flash-attn",
            "FAIL",
            "attention flash_attention_2 is asked for and flash-attn is not installed: "
            "pip install -e '.[flash]' --no-build-isolation (needs nvcc)",
        )
    return _pinned("flash-attn", have, pin)


def check_verl(facts: dict[str, Any], ctx: Context) -> Check:
    return _pinned("veRL", facts["packages"].get("verl"), facts["pins"].get("verl"), "pip install -e '.[gpu]'")


def check_vllm(facts: dict[str, Any], ctx: Context) -> Check:
    return _pinned("vLLM", facts["packages"].get("vllm"), facts["pins"].get("vllm"), "pip install -e '.[gpu]'")


def _pinned(name: str, have: str | None, pin: str | None, fix: str = "reinstall it") -> Check:
    if not have:
        return Check(name, "FAIL", f"not installed: {fix}")
    if pin and have != pin:
        return Check(name, "FAIL", f"{have} installed, the project pins {pin}: {fix}")
    return Check(name, "OK", have + (f" (pinned {pin})" if pin else " (no pin on record)"))


def check_backbone(facts: dict[str, Any], ctx: Context) -> Check:
    row = BACKBONES.get(ctx.model)
    found = facts["model_config"]
    if row is None:
        return Check(
            "backbone config", "SKIP", f"{ctx.model} is not in training/engines/verl/checks/backbones.py's table"
        )
    if not found.get("where"):
        return Check("backbone config", "SKIP", found.get("why", "no config.json"))
    config = found["config"]
    text = config.get("text_config") or config
    wrong = [
        f"{key} {getattr(row, key)} (table) vs {text.get(key)}" for key in FIELDS if text.get(key) != getattr(row, key)
    ]
    if row.arch is not None:
        real = Architecture.from_config(config)
        wrong += [
            f"{key} {getattr(row.arch, key)} (table) vs {getattr(real, key)}"
            for key in row.arch.__dataclass_fields__
            if getattr(real, key) != getattr(row.arch, key)
        ]
    if wrong:
        return Check(
            "backbone config",
            "FAIL",
            f"{found['where']}/config.json differs from training/engines/verl/checks/backbones.py: "
            + "; ".join(wrong)
            + " - fix the table row (and its citation)",
        )
    return Check("backbone config", "OK", f"{found['where']}/config.json matches the table row")


def check_chat_template(facts: dict[str, Any], ctx: Context) -> Check:
    from training.engines.verl.checks.chat_golden import GOLDEN

    chat = facts["chat"]
    if "renders" not in chat:
        return Check("chat template", "SKIP", chat.get("why", "no tokenizer"))
    row = BACKBONES.get(ctx.model)
    family = row.chat_template if row else template_family(chat.get("template", ""))
    golden = GOLDEN.get(family or "")
    if golden is None:
        return Check(
            "chat template",
            "SKIP",
            f"no golden prompt committed for template family {family!r} (training/engines/verl/checks/chat_golden.py)",
        )
    for key, want in golden.items():
        got = chat["renders"].get(key)
        if got != want:
            pairs = zip(got or "", want, strict=False)
            at = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(got or ""), len(want)))
            return Check(
                "chat template",
                "FAIL",
                f"{key}: the tokenizer renders {(got or '')[at : at + 60]!r} at "
                f"character {at} where the golden {family} prompt has "
                f"{want[at : at + 60]!r}: use the checkpoint's own tokenizer files",
            )
    return Check("chat template", "OK", f"{family}: {', '.join(golden)} match the golden prompts")


def template_family(template: str) -> str | None:
    """The golden family a template belongs to, read from the template text."""
    if "<|im_start|>" not in template:
        return None
    return "chatml (qwen3, <think>)" if "enable_thinking" in template else "chatml"


def check_shared_storage(facts: dict[str, Any], ctx: Context) -> Check:
    fs = facts["run_dir_fs"]
    if ctx.nnodes <= 1:
        return Check("shared storage", "SKIP", f"one node: run_dir {fs['path']} is on {fs['fstype']} ({fs['mount']})")
    if fs["fstype"] in SHARED_FILESYSTEMS and not any(
        fs["path"] == p or fs["path"].startswith(p + "/") for p in LOCAL_ONLY_PREFIXES
    ):  # the same rule the launch applies (training/runs/resume_policy.py)
        return Check("shared storage", "OK", f"run_dir {fs['path']} is on {fs['fstype']} ({fs['mount']})")
    return Check(
        "shared storage",
        "FAIL",
        f"run_dir {fs['path']} is on a local {fs['fstype']} filesystem "
        f"({fs['mount']}) and {ctx.nnodes} nodes must all see it: "
        "run_dir=<a path on NFS/Lustre/GPFS...>",
    )


CHECKS: tuple[Callable[[dict[str, Any], Context], Check], ...] = (
    check_cuda,
    check_driver,
    check_gpus,
    check_memory,
    check_flash_attn,
    check_verl,
    check_vllm,
    check_backbone,
    check_chat_template,
    check_shared_storage,
)


def run_checks(facts: dict[str, Any], ctx: Context) -> list[Check]:
    return [check(facts, ctx) for check in CHECKS]


def _tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())
