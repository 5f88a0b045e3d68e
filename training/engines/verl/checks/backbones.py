"""The GPU backbones of the four designs: a small cited table the verl engine's checks use.

Hubs are unreachable where the project is built, so what the checks need from each
backbone's ``config.json`` is written down here, with its source. On a GPU node
``tests/gpu/test_verl_smoke.py::test_backbone_table_matches_the_hub`` compares every row
with the real ``config.json`` (where the hub is reachable). :func:`model_card` reads a local
model directory's ``config.json`` first and falls back to this table, so a dry run on an
offline machine still checks a hub name it knows, and says so when it knows nothing.

Which backbone per design (each design's page, designs/<name>/README.md):
- ReToolSQL: Gemma 4 31B Instruct, the paper's own model (paper §4.2). 31B dense
  needs FSDP parameter + optimizer offload on 8x80 GB (``fsdp_offload``). Gemma 4 E4B
  Instruct, the paper's scale ablation under identical settings (§4.2, §6.3, §6.4).
- Think2SQL: Qwen2.5-Coder-7B-Instruct, the headline RL-QATCH model (paper §5).
- TRUST-SQL: Qwen3-8B, the middle of the paper's 4B/8B/14B (paper §4.1).
- DualSQL: Qwen3-8B, DualSQL-8B, the headline (paper §5; "Qwen3 ... supported by
  VeRL", Limitations); Qwen3-4B, DualSQL-4B (Table 1, App. B: 100 steps instead of 300).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.errors import ConfigError


@dataclass(frozen=True)
class Architecture:
    """The decoder numbers memory sizing needs (``training/engines/verl/checks/memory.py``), as ``config.json``
    spells them (``text_config`` for multimodal checkpoints).

    Hybrid attention (Gemma 4): ``sliding_layers`` of the ``num_hidden_layers`` attend to
    the last ``sliding_window`` tokens only (their KV cache stops growing there); the other
    (global) layers have their own KV heads and head size, and with ``global_k_eq_v`` their
    values reuse the keys' projection (no ``v_proj`` weights).
    """

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    sliding_layers: int = 0
    sliding_window: int | None = None
    global_key_value_heads: int | None = None  # None: as num_key_value_heads
    global_head_dim: int | None = None  # None: as head_dim
    global_k_eq_v: bool = False
    per_layer_input_size: int = 0  # Gemma 4 E-models: per-layer embeddings of this width per layer
    per_layer_vocab_size: int = 0  # ... over this vocabulary (0: as vocab_size)

    @property
    def global_layers(self) -> int:
        return self.num_hidden_layers - self.sliding_layers

    @classmethod
    def from_config(cls, data: dict[str, Any]) -> Architecture:
        """From a parsed ``config.json`` (its ``text_config`` when there is one)."""
        text = data.get("text_config") or data
        heads = int(text["num_attention_heads"])
        kinds = text.get("layer_types") or []
        sliding = sum(1 for kind in kinds if kind == "sliding_attention")
        tie = text.get("tie_word_embeddings", data.get("tie_word_embeddings", False))
        return cls(
            hidden_size=int(text["hidden_size"]),
            intermediate_size=int(text["intermediate_size"]),
            num_hidden_layers=int(text["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(text.get("num_key_value_heads") or heads),
            head_dim=int(text.get("head_dim") or int(text["hidden_size"]) // heads),
            vocab_size=int(text["vocab_size"]),
            tie_word_embeddings=bool(tie),
            sliding_layers=sliding,
            sliding_window=text.get("sliding_window") if sliding else None,
            global_key_value_heads=text.get("num_global_key_value_heads"),
            global_head_dim=text.get("global_head_dim") if sliding else None,
            global_k_eq_v=bool(text.get("attention_k_eq_v", False)),
            per_layer_input_size=int(text.get("hidden_size_per_layer_input") or 0),
            per_layer_vocab_size=int(text.get("vocab_size_per_layer_input") or 0),
        )


@dataclass(frozen=True)
class Backbone:
    """What the checks read from a model's ``config.json`` (text part for multimodal ones)."""

    hub_name: str
    group: str  # recipes/model/<group>.yaml selects it (model=<group>)
    max_position_embeddings: int  # vLLM refuses max_model_len above this (rope scaling aside)
    num_attention_heads: int  # tensor / sequence parallel sizes must divide it
    num_key_value_heads: int
    vocab_size: int
    chat_template: str  # the template family the checkpoint's tokenizer carries
    tensor_parallel_size: int  # vLLM rollout TP the engine uses on 80 GB GPUs
    source: str  # where the numbers come from
    fsdp_offload: bool = False  # FSDP parameter + optimizer offload to CPU (too big for 8x80 GB otherwise)
    arch: Architecture | None = None  # the decoder's sizes (training/engines/verl/checks/memory.py)


BACKBONES: dict[str, Backbone] = {
    b.hub_name: b
    for b in (
        # https://huggingface.co/google/gemma-4-31B-it/blob/main/config.json (text_config):
        # 60 layers (50 sliding-window, 10 global), 32 heads, 16 KV heads on sliding layers
        # (4 on global ones), vocab 262,144, 262,144 positions; architecture
        # Gemma4ForConditionalGeneration (text + vision). Model card:
        # https://ai.google.dev/gemma/docs/core/model_card_4
        # 31B dense: fp32 master weights + AdamW states alone are ~46 GB per GPU on 8 GPUs,
        # beside vLLM's share, so the actor and reference offload to CPU between passes.
        # text_config: hidden 5,376, intermediate 21,504, head_dim 256 (sliding) / global_head_dim 512,
        # num_global_key_value_heads 4, attention_k_eq_v true, sliding_window 1,024, tied embeddings:
        # 30.7B parameters by the formula in training/engines/verl/checks/memory.py (the card says 30.7B).
        Backbone(
            "google/gemma-4-31B-it",
            "gemma4_31b",
            262_144,
            32,
            16,
            262_144,
            "gemma4",
            4,
            "huggingface.co/google/gemma-4-31B-it config.json (text_config)",
            fsdp_offload=True,
            arch=Architecture(
                5376,
                21504,
                60,
                32,
                16,
                256,
                262_144,
                True,
                sliding_layers=50,
                sliding_window=1024,
                global_key_value_heads=4,
                global_head_dim=512,
                global_k_eq_v=True,
            ),
        ),
        # https://huggingface.co/google/gemma-4-E4B-it/blob/main/config.json (text_config), the
        # numbers as NVIDIA Megatron-Bridge's Gemma 4 E4B recipe mirrors them: 42 layers (one
        # global layer in six: 35 sliding-window of 512 tokens, 7 global), hidden 2,560,
        # intermediate 10,240, 8 heads, 2 KV heads (head_dim 256; global layers 2 KV heads of
        # 512), vocab 262,144, 131,072 positions, tied embeddings, and per-layer embeddings
        # (262,144 x 42 x 256 = 2.8B parameters beside the 4.6B of the decoder and the
        # embedding: 7.4B stored, "E4B" = ~4B effective; audio and vision towers left out).
        # The last 18 layers share their KV cache; the KV estimate counts every layer (an
        # over-estimate, the safe side).
        Backbone(
            "google/gemma-4-E4B-it",
            "gemma4_e4b",
            131_072,
            8,
            2,
            262_144,
            "gemma4",
            1,
            "huggingface.co/google/gemma-4-E4B-it config.json (text_config), as Megatron-Bridge's "
            "gemma4_e4b recipe mirrors it",
            arch=Architecture(
                2560,
                10240,
                42,
                8,
                2,
                256,
                262_144,
                True,
                sliding_layers=35,
                sliding_window=512,
                global_key_value_heads=2,
                global_head_dim=512,
                per_layer_input_size=256,
                per_layer_vocab_size=262_144,
            ),
        ),
        # https://huggingface.co/Qwen/Qwen2.5-Coder-7B-Instruct/blob/main/config.json:
        # 28 layers, 28 heads, 4 KV heads, vocab 152,064, max_position_embeddings 32,768
        # (the card's 128K needs YaRN factor 4, which the card adds by hand).
        # hidden 3,584, intermediate 18,944, head_dim 128, untied embeddings: 7.6B (card: 7.61B).
        Backbone(
            "Qwen/Qwen2.5-Coder-7B-Instruct",
            "qwen2_5_coder_7b",
            32_768,
            28,
            4,
            152_064,
            "chatml",
            1,
            "huggingface.co/Qwen/Qwen2.5-Coder-7B-Instruct config.json",
            arch=Architecture(3584, 18944, 28, 28, 4, 128, 152_064, False),
        ),
        # https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json: 36 layers, 32 heads,
        # 8 KV heads, vocab 151,936, max_position_embeddings 40,960 (= 32,768 output +
        # 8,192 prompt, the card's "32,768 natively"; 131,072 with YaRN factor 4).
        # hidden 4,096, intermediate 12,288, head_dim 128, untied embeddings: 8.2B (card: 8.2B).
        Backbone(
            "Qwen/Qwen3-8B",
            "qwen3_8b",
            40_960,
            32,
            8,
            151_936,
            "chatml (qwen3, <think>)",
            1,
            "huggingface.co/Qwen/Qwen3-8B config.json",
            arch=Architecture(4096, 12288, 36, 32, 8, 128, 151_936, False),
        ),
        # https://huggingface.co/Qwen/Qwen3-4B/blob/main/config.json: 36 layers, 32 heads,
        # 8 KV heads, head_dim 128, hidden 2,560, intermediate 9,728, vocab 151,936, tied
        # embeddings, max_position_embeddings 40,960 (as Qwen3-8B): 4.0B (card: 4.0B).
        Backbone(
            "Qwen/Qwen3-4B",
            "qwen3_4b",
            40_960,
            32,
            8,
            151_936,
            "chatml (qwen3, <think>)",
            1,
            "huggingface.co/Qwen/Qwen3-4B config.json",
            arch=Architecture(2560, 9728, 36, 32, 8, 128, 151_936, True),
        ),
    )
}
NOTE = "numbers from the cited config.json files, not read from a checkpoint here"


@dataclass(frozen=True)
class ModelCard:
    """The numbers the checks use for one model path, and where they came from."""

    path: str
    max_position_embeddings: int | None
    num_attention_heads: int | None
    num_key_value_heads: int | None
    vocab_size: int | None
    rope_scaling: dict[str, Any] | None
    origin: str  # "config.json at <dir>" | "backbone table (<source>)" | "unknown: <why>"
    config_dir: str | None = None  # the directory of the config.json read (None: the table or nothing)

    @property
    def known(self) -> bool:
        return self.max_position_embeddings is not None


def model_card(path: str) -> ModelCard:
    """The context and head counts of ``path``: its ``config.json`` when it is a local
    directory, else the table row of that hub name, else an unknown card that says why."""
    config = Path(path) / "config.json"
    if config.is_file():
        data = json.loads(config.read_text())
        text = data.get("text_config") or data  # multimodal checkpoints nest the decoder
        return ModelCard(
            path,
            text.get("max_position_embeddings"),
            text.get("num_attention_heads"),
            text.get("num_key_value_heads", text.get("num_attention_heads")),
            text.get("vocab_size"),
            text.get("rope_scaling") or data.get("rope_scaling"),
            f"config.json at {Path(path).resolve()}",
            str(path),
        )
    row = BACKBONES.get(path)
    if row is not None:
        return ModelCard(
            path,
            row.max_position_embeddings,
            row.num_attention_heads,
            row.num_key_value_heads,
            row.vocab_size,
            None,
            f"backbone table ({row.source}; {NOTE})",
        )
    why = (
        "not a local directory with config.json and not in training/engines/verl/checks/backbones.py's table; "
        "its context length and head counts are unchecked (download it, or pass a local directory)"
    )
    return ModelCard(path, None, None, None, None, None, f"unknown: {why}")


def architecture_of(path: str) -> tuple[Architecture | None, str]:
    """The decoder sizes of ``path`` and where they come from: its ``config.json`` when it
    is a local directory, else the table row of that hub name, else (None, why)."""
    config = Path(path) / "config.json"
    if config.is_file():
        try:
            return Architecture.from_config(json.loads(config.read_text())), f"config.json at {Path(path).resolve()}"
        except (KeyError, TypeError, ValueError) as err:
            return None, f"{config} lacks a size the estimate needs ({err!r})"
    row = BACKBONES.get(path)
    if row is not None and row.arch is not None:
        return row.arch, f"backbone table ({row.source}; {NOTE})"
    return (
        None,
        f"{path}: not a local directory with config.json and not in training/engines/verl/checks/backbones.py's table",
    )


def backbone_for_group(group: str) -> Backbone:
    for row in BACKBONES.values():
        if row.group == group:
            return row
    raise ConfigError(f"no backbone for model group {group!r}; known: {sorted(b.group for b in BACKBONES.values())}")


def derive_long_context_model(source: str | Path, target: str | Path, factor: float, rope_type: str = "yarn") -> Path:
    """A model directory whose ``config.json`` carries rope scaling and
    ``max_position_embeddings`` raised by ``factor`` (every other file linked, not copied).

    veRL's ``override_config`` cannot carry YaRN and vLLM's length check reads only
    ``max_position_embeddings``, so a longer context is this derived directory, used as
    ``model.path``. ``original_max_position_embeddings`` keeps the trained length, which
    YaRN scales from.
    """
    source, target = Path(source), Path(target)
    config_path = source / "config.json"
    if not config_path.is_file():
        raise ConfigError(
            f"model.context_factor needs a local model directory with config.json; {source} has none "
            "(download the checkpoint first, e.g. `huggingface-cli download <hub name> --local-dir <dir>`)"
        )
    if not factor > 1.0:
        raise ConfigError(f"model.context_factor={factor}: must be > 1 (1 or null keeps the native context)")
    data = json.loads(config_path.read_text())
    text = data.get("text_config") or data
    params = text.get("rope_parameters") or {}  # transformers 5 writes this; 4.x wrote rope_scaling
    if text.get("rope_scaling") or params.get("rope_type", "default") != "default":
        raise ConfigError(
            f"{config_path} already scales rope ({text.get('rope_scaling') or params}); "
            "use it as it is, without model.context_factor"
        )
    native = int(text["max_position_embeddings"])
    scaling = {"rope_type": rope_type, "factor": float(factor), "original_max_position_embeddings": native}
    text["rope_scaling"] = scaling  # what vLLM and transformers 4.x read
    if params:
        text["rope_parameters"] = {**params, **scaling}  # what transformers 5 reads (rope_theta kept)
    text["max_position_embeddings"] = int(native * factor)
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        link = target / item.name
        if item.name != "config.json" and not link.exists():
            link.symlink_to(item.resolve())
    (target / "config.json").write_text(json.dumps(data, indent=2))
    return target
