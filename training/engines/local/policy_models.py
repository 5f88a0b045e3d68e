"""The local engine's model bundle: the fp32 policy, the weights ``generate`` runs on, and
the frozen KL reference.

The policy keeps fp32 master weights (log-probs and the update run on them, under the
configured autocast). Generation runs on a bf16 copy where bf16 is native (see
``generation_copy``), refreshed after every optimizer step, as veRL does with vLLM + FSDP.
The reference policy is loaded for each reference pass (once per update, while beta > 0)
and dropped after it, so it never sits beside the update's gradients and AdamW state. Under
LoRA (``model.lora.rank > 0``, lora.py) the policy is a PEFT model and the reference is
the same weights with the adapter disabled (or the warm start's adapter swapped in).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.config import ModelConfig

Say = Callable[[str], None]


@dataclass
class PolicyModels:
    """The policy (``model``), its tokenizer, the generation weights (``gen_model``: the
    policy itself or a bf16 copy) and the KL reference (``ref_model``: loaded during a
    reference pass only, else None)."""

    model: Any
    tokenizer: Any
    source: str
    device: str
    autocast: Any  # torch.dtype | None: the autocast of log-prob and update passes
    gen_model: Any
    given: bool = False  # the model was handed in (tests, benchmarks): its reference is a copy of it
    initial: Any = None  # a given model's frozen initial weights (its KL reference)
    ref_model: Any = None
    lora: bool = False  # the policy is a PEFT model: the reference runs on its own weights (lora.py)
    reference_adapter: Any = None  # under LoRA: the warm start's adapter weights (None: adapter off)
    reference_on: bool = False  # the reference is in use (beta > 0 now or later)
    reference_path: str | None = None  # full weights: where each reference pass loads it from

    @classmethod
    def load(
        cls,
        settings: ModelConfig,
        device: str,
        path: str | None,
        given_model: Any = None,
        given_tokenizer: Any = None,
        given_source: str = "",
        keep_initial: bool = False,
        say: Say = print,
    ) -> PolicyModels:
        """Load the policy from ``path`` (or take ``given_model``), in train mode, with the
        generation copy ``settings.generation_dtype`` asks for. ``keep_initial``: keep a
        frozen copy of a given model as its KL reference."""
        from training.generation.loading import autocast_for, load_model, prepare_tokenizer

        if given_model is not None:
            model, tokenizer = given_model.to(device), prepare_tokenizer(given_tokenizer)
            source = given_source or "given"
        else:
            loaded = load_model(path, device, say=say, trust_remote_code=settings.trust_remote_code)
            model, tokenizer, source = loaded.model, loaded.tokenizer, loaded.source
        lora = settings.lora.enabled
        if lora:
            from training.engines.local.lora import apply_lora, parameter_summary

            model = apply_lora(model, settings.lora)
            say(f"[model] {parameter_summary(model)}")
        model.train()
        if settings.gradient_checkpointing:
            model.gradient_checkpointing_enable()
            if lora:  # frozen embeddings: the checkpointed layers' inputs need a gradient (as veRL does)
                model.enable_input_require_grads()
        autocast = autocast_for(settings.autocast, device)
        gen_model = generation_copy(model, device, settings.generation_dtype, settings.decode_attention)
        say(
            f"[model] {source}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
            f"parameters, fp32 weights, autocast={autocast}, "
            f"generation copy {generation_kind(settings.generation_dtype, device)}"
        )
        given = given_model is not None
        initial = frozen_copy(model) if given and keep_initial and not lora else None
        return cls(
            model=model,
            tokenizer=tokenizer,
            source=source,
            device=device,
            autocast=autocast,
            gen_model=gen_model,
            given=given,
            initial=initial,
            lora=lora,
        )

    def sync_generation_copy(self) -> None:
        """Copy the policy's weights into the generation copy (after each weight change);
        weights set aside by :meth:`generation_copy_set_aside` are allocated again."""
        if self.gen_model is self.model:
            return
        from training.generation.int8_copy import copy_parameters, is_int8_copy, refresh_int8_copy

        if is_int8_copy(self.gen_model):
            refresh_int8_copy(self.gen_model, self.model)
        else:
            copy_parameters(self.gen_model, self.model)

    @contextlib.contextmanager
    def generation_copy_set_aside(self) -> Iterator[None]:
        """Free the generation copy's weights while only the policy runs (SFT, the update),
        and bring them back from the policy's weights at the end, failure included. The
        copy is not used meanwhile and is refreshed after every weight change anyway, so
        this costs one allocation per refresh and lowers the run's peak memory by the
        copy's size (0.27 GB bf16 on SmolLM2-135M). The int8 copy's quantised layers stay."""
        from training.runs.usage import release_free_memory

        if self.gen_model is not self.model:
            for param in self.gen_model.parameters():
                param.data = torch.empty(0, dtype=param.dtype, device=param.device)
            release_free_memory()
        try:
            yield
        finally:
            release_free_memory()  # what the block freed (SFT's AdamW state), before the copy comes back
            self.sync_generation_copy()

    def remember_initial(self) -> None:
        """A given model's KL reference becomes its current weights (after the warm start);
        under LoRA, any model's: the warm start's adapter."""
        if self.lora:
            from training.engines.local.lora import adapter_state

            self.reference_adapter = adapter_state(self.model)
        elif self.initial is not None:
            self.initial = frozen_copy(self.model)

    def keep_reference(self, needed: bool, path: str | None, say: Say = print, step: int = 0) -> None:
        """Whether the KL reference is in use (``needed``: beta > 0 now or later) and where it
        comes from: the frozen initial policy in ``path`` (or a given model's initial copy),
        loaded by :meth:`reference` for each pass. Under LoRA nothing is loaded but the warm
        start's adapter (``path/adapter/``, when ``path`` is a warm start)."""
        if self.lora:
            if needed and not self.reference_on and self.reference_adapter is None and path:
                self.reference_adapter = _warm_start_adapter(Path(path))
            elif not needed and self.reference_on:
                self.reference_adapter = None
                say(f"[kl] beta is 0 from step {step} on: reference adapter released")
            self.reference_on = needed
            return
        if not needed and self.reference_on:
            say(f"[kl] beta is 0 from step {step} on: no reference pass from now on")
        self.reference_on, self.reference_path = needed, path

    @contextlib.contextmanager
    def reference(self) -> Iterator[Any]:
        """The KL reference model to run: the frozen initial policy, loaded for this pass and
        dropped after it (on SmolLM2-135M a 0.5 GB fp32 copy that would otherwise sit through
        the update, where a run's memory peaks; loading it again costs about a second per
        step), or under LoRA the policy itself with its adapter disabled / the warm start's
        adapter swapped in."""
        if not self.lora:
            from training.runs.usage import release_free_memory

            self.ref_model = self._initial_policy(self.reference_path, say=lambda _: None)
            try:
                yield self.ref_model
            finally:
                self.ref_model = None
                release_free_memory()
            return
        from training.engines.local.lora import reference_weights

        with reference_weights(self.model, self.reference_adapter) as model:
            yield model

    def _initial_policy(self, path: str | None, say: Say) -> Any:
        if self.given:
            ref = copy.deepcopy(self.initial)
        else:
            from training.generation.loading import load_model

            ref = load_model(path, self.device, say=say).model
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref


def generation_copy(model: Any, device: str, generation_dtype: str, decode_attention: str) -> Any:
    """The weights ``generate`` runs on: a bf16 copy where bf16 is native, an int8 copy on
    a CPU without it (training/generation/int8_copy.py), else the policy (``fp32``). On CPU
    either copy decodes with the hybrid attention (``decode_attention=auto``,
    training/generation/cpu_attention.py); the policy itself keeps its own.

    Measured on 2 shared cores (8 rows, 600-token prompts): bf16 weights decode at
    0.10 s/step and prefill in 6 s, fp32 at 1.03 s/step and 23 s; autocast over fp32
    weights was slower still (it re-casts every weight at every step). The copy is
    refreshed after every optimizer step (``PolicyModels.sync_generation_copy``); log-probs
    and the update use the fp32 master weights, as veRL does with vLLM + FSDP.
    """
    kind = generation_kind(generation_dtype, device)
    if kind == "fp32":
        return model
    if kind == "int8":
        from training.generation.int8_copy import int8_generation_copy

        gen = int8_generation_copy(model)
    else:
        gen = copy.deepcopy(model).to(torch.bfloat16).eval()
        for p in gen.parameters():
            p.requires_grad_(False)
    if device == "cpu" and decode_attention == "auto":  # a copy: the policy's own passes keep sdpa
        from training.generation.cpu_attention import use_hybrid_cpu_attention

        use_hybrid_cpu_attention(gen)
    return gen


def generation_kind(generation_dtype: str, device: str) -> str:
    """``bf16``, ``int8`` or ``fp32``: the copy ``generation_dtype`` asks for on ``device``
    (``auto``: bf16 where native, int8 on a CPU without native bf16, else fp32)."""
    from training.generation.loading import autocast_dtype

    if generation_dtype == "int8" and device != "cpu":
        from tools.errors import ConfigError

        raise ConfigError(
            f"model.generation_dtype=int8 on {device}: the int8 copy uses PyTorch's CPU kernels; "
            "set model.generation_dtype=auto or bf16"
        )
    if generation_dtype != "auto":
        return generation_dtype
    if autocast_dtype(device) is not None:
        return "bf16"
    return "int8" if device == "cpu" else "fp32"


def _warm_start_adapter(path: Path) -> Any:
    """The adapter weights a LoRA warm start saved in ``path/adapter/``; None when ``path``
    is not such a warm start (the reference is then the base: the adapter disabled)."""
    from training.engines.local.lora import ADAPTER_WEIGHTS, WARM_START_ADAPTER, is_adapter_dir

    adapter = path / WARM_START_ADAPTER
    if not is_adapter_dir(adapter):
        return None
    from safetensors.torch import load_file

    return load_file(str(adapter / ADAPTER_WEIGHTS))


def frozen_copy(model: Any) -> Any:
    return copy.deepcopy(model).eval()
