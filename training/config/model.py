"""The ``engine`` and ``model`` groups of the typed configuration (``training.config`` builds
them): which engine runs the update and on what device, and the policy - its starting weights,
precision, attention and context, or an OpenAI-compatible endpoint that serves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from training.config.fields import _f, _need, engine_names, need_choice


@dataclass
class EngineConfig:
    """``engine`` group: where the update runs."""

    name: str = _f(
        "auto", "auto | local | verl (a registered engine); auto picks verl with CUDA + vLLM, else local", engine_names
    )
    device: str = _f("auto", "local engine device: auto | cpu | cuda | cuda:N")
    laptop_profile: str = _f("auto", "auto (on for the local engine on CPU) | on | off", ("auto", "on", "off"))
    cache_check: str = _f(
        "refuse",
        "engine=verl with trainer.nnodes > 1: training databases whose tool caches are "
        "not built (python -m tools build-cache) refuse | warn | off",
        ("refuse", "warn", "off"),
    )
    node_check: bool = _f(
        True,
        "engine=verl with trainer.nnodes > 1: probe every Ray node first (the sqlagent_rl "
        "plugin and agent loop resolve; databases, run_dir and caches visible)",
    )

    def __post_init__(self) -> None:
        need_choice("engine.name", self.name, engine_names)
        _need(
            self.laptop_profile in ("auto", "on", "off"),
            f"engine.laptop_profile={self.laptop_profile!r}; choose auto, on or off",
        )
        _need(
            self.cache_check in ("refuse", "warn", "off"),
            f"engine.cache_check={self.cache_check!r}; choose refuse, warn or off",
        )


@dataclass
class LoraConfig:
    """``model.lora`` group: train low-rank adapters instead of every weight (rank 0 = off).

    One set of keys for both engines: the local engine wraps the policy with PEFT's
    ``LoraConfig`` (training/engines/local/lora.py); engine=verl writes veRL's
    ``actor_rollout_ref.model.lora_rank`` / ``lora_alpha`` / ``target_modules``.
    """

    rank: int = _f(0, "LoRA rank r of every adapted matrix; 0 = full fine-tuning (project default)")
    alpha: int = _f(
        32,
        "LoRA alpha, an integer (veRL's lora_alpha is one): the adapter's update is scaled by alpha / rank",
    )
    target_modules: list[str] | str = _f(
        "all-linear",
        "which linear layers get an adapter: all-linear (every linear layer but the output head, "
        "PEFT's and veRL's default) or a list of module names, e.g. [q_proj,k_proj,v_proj,o_proj]",
    )
    dropout: float = _f(0.0, "dropout on the adapter's input (local engine; veRL's FSDP LoRA has none: keep 0 there)")

    def __post_init__(self) -> None:
        _need(
            isinstance(self.rank, int) and self.rank >= 0,
            f"model.lora.rank={self.rank!r}: 0 (off) or a positive integer, e.g. model.lora.rank=32",
        )
        _need(self.alpha > 0, f"model.lora.alpha={self.alpha}: a positive number (the scale is alpha / rank)")
        _need(0.0 <= self.dropout < 1.0, f"model.lora.dropout={self.dropout}: a probability in [0, 1)")
        modules = [self.target_modules] if isinstance(self.target_modules, str) else list(self.target_modules)
        _need(
            bool(modules) and all(isinstance(m, str) and m for m in modules),
            f"model.lora.target_modules={self.target_modules!r}: all-linear or a non-empty list of module names",
        )

    @property
    def enabled(self) -> bool:
        return self.rank > 0


@dataclass
class ModelConfig:
    """``model`` group: the policy's starting weights."""

    path: str | None = _f(None, "HF model directory or hub name; null = the embedded SmolLM2-135M-Instruct")
    autocast: str = _f(
        "auto", "auto (bf16 where native) | bf16 | off; master weights stay fp32", ("auto", "bf16", "off")
    )
    generation_dtype: str = _f(
        "auto",
        "weights generate runs on: auto (a bf16 copy where bf16 is native, an int8 copy on a CPU "
        "without it: training/generation/int8_copy.py) | bf16 | int8 | fp32",
        ("auto", "bf16", "int8", "fp32"),
    )
    decode_attention: str = _f(
        "auto",
        "auto: on CPU, generate with sdpa prefill + plain-matmul one-token decode "
        "(3x faster decode, same math up to bf16 rounding; training/generation/cpu_attention.py) | off",
        ("auto", "off"),
    )
    prefix_reuse: bool = _f(
        True,
        "local generation (training rollouts, eval.run): each episode keeps its KV cache between "
        "turns and prefills only the new tokens (same tokens and sampling distribution; "
        "training/generation/prefix_reuse.py) | false: re-encode the whole conversation every turn",
    )
    gradient_checkpointing: bool = _f(False, "trade compute for memory in the update")
    lora: LoraConfig = field(default_factory=LoraConfig)
    trust_remote_code: bool = _f(False, "passed to transformers from_pretrained")
    attn_implementation: str = _f(
        "sdpa",
        "engine=verl actor attention: sdpa (packed-sequence mask) | "
        "flash_attention_2 (opt-in: needs the flash-attn wheel) | eager",
    )
    context_factor: float | None = _f(
        None,
        "engine=verl: > 1 trains on a derived model directory with YaRN rope "
        "scaling and max_position_embeddings x factor; null = native context",
    )
    base_url: str | None = _f(
        None,
        "eval.run: score an OpenAI-compatible endpoint (http://HOST:PORT/v1) instead "
        "of loading weights; the tokenizer of model.path carries its text",
    )
    name: str | None = _f(None, "the endpoint's served model name (with model.base_url)")
    api_key_env: str = _f("OPENAI_API_KEY", "environment variable holding the endpoint's API key")
    concurrency: int = _f(
        32,
        "with model.base_url: requests in flight at once; each episode sends its next turn "
        "as soon as its tool call ran (1 = one request at a time)",
    )
    timeout_s: float = _f(
        300.0, "with model.base_url: seconds one request may take before it is retried (then counted as failed)"
    )

    def __post_init__(self) -> None:
        _need(
            self.attn_implementation in ("sdpa", "flash_attention_2", "eager"),
            f"model.attn_implementation={self.attn_implementation!r}; sdpa, flash_attention_2 or eager",
        )
        _need(
            self.context_factor is None or self.context_factor > 1,
            f"model.context_factor={self.context_factor}: null (native context) or a factor > 1",
        )
        _need(
            self.base_url is None or bool(self.name),
            f"model.base_url={self.base_url!r} needs model.name=<the served model name>",
        )
        _need(
            isinstance(self.concurrency, int) and self.concurrency >= 1,
            f"model.concurrency={self.concurrency!r}: the most requests in flight, a positive integer",
        )
        _need(self.timeout_s > 0, f"model.timeout_s={self.timeout_s}: a positive number of seconds")
        _need(self.autocast in ("auto", "bf16", "off"), f"model.autocast={self.autocast!r}; auto, bf16 or off")
        _need(
            self.generation_dtype in ("auto", "bf16", "int8", "fp32"),
            f"model.generation_dtype={self.generation_dtype!r}; auto, bf16, int8 or fp32",
        )
        _need(
            self.decode_attention in ("auto", "off"), f"model.decode_attention={self.decode_attention!r}; auto or off"
        )
