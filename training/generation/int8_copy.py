"""The int8 generation copy for CPUs without native bf16 (``model.generation_dtype=int8``,
or ``auto`` on such a CPU).

PyTorch's dynamic quantisation (fbgemm / x86 kernels): each quantised ``nn.Linear`` keeps
int8 weights with one scale per output channel and quantises its input per call. Which
layers are quantised was picked by measurement on SmolLM2-135M
(``benchmarks/bench_int8_copy.py``: one core, 8 rows of 300 random tokens, 10 decode steps;
greedy agreement and KL against fp32 on a 500-token SQL prompt; ``docs/engines.md``
"Generation copies"):

    quantised              prefill   decode/step   greedy agreement   KL to fp32 (nats/token)
    none (fp32)            9.30 s    0.141 s       1.000              0
    every linear layer     4.82 s    0.083 s       0.877              0.454
    all but MLP down       5.66 s    0.087 s       0.924              0.114
    attention only         7.69 s    0.129 s       0.963              0.046
    bf16 weights (native)  4.75 s    0.177 s       0.990              0.0006

The MLP's down projection (whose inputs carry the model's large activation outliers) and
the LM head stay fp32. The copy is refreshed in place after every optimizer step
(:func:`refresh_int8_copy`), so the ``generate`` function built on it stays valid; the
update and log-probs use the fp32 master weights, and the mismatch is logged as
``rollout_corr/*`` (``algorithm.rollout_correction`` corrects it when enabled).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch

KEEP_FP32 = ("down_proj", "lm_head")
"""Linear layers left in fp32 (module names ending so): quantising them costs most accuracy."""


def quantised_names(model: Any) -> list[str]:
    """The ``nn.Linear`` modules of ``model`` that the int8 copy quantises."""
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear)
        and not name.endswith(KEEP_FP32)
        and ".lora_" not in name  # a LoRA adapter's own small layers stay fp32
        and not name.endswith(tuple(f"{keep}.base_layer" for keep in KEEP_FP32))
    ]


def int8_generation_copy(model: Any) -> Any:
    """A copy of ``model`` with int8 dynamic-quantised linear layers, in eval mode, no grads."""
    gen = copy.deepcopy(model).eval()
    for p in gen.parameters():
        p.requires_grad_(False)
    _quantise_into(gen, model)
    return gen


def refresh_int8_copy(gen: Any, model: Any) -> None:
    """Bring ``gen`` (an :func:`int8_generation_copy`) to ``model``'s current weights: the
    fp32 parameters are copied, each quantised layer is quantised again from its fp32 twin."""
    copy_parameters(gen, model)
    _quantise_into(gen, model)


def copy_parameters(gen: Any, model: Any) -> None:
    """Copy ``model``'s parameters into the generation copy ``gen``'s, by name, each in the
    copy's dtype; a parameter set aside (emptied while only the policy runs) is allocated
    again (``PolicyModels.generation_copy_set_aside``)."""
    own = dict(model.named_parameters())
    with torch.no_grad():
        for name, param in gen.named_parameters():
            if param.numel() == 0:
                param.data = own[name].detach().to(param.dtype, copy=True)
            else:
                param.copy_(own[name])


def _quantise_into(gen: Any, model: Any) -> None:
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import per_channel_dynamic_qconfig

    for name in quantised_names(model):
        source = model.get_submodule(name)
        plain = torch.nn.Linear(source.in_features, source.out_features, bias=source.bias is not None)
        with torch.no_grad():
            plain.weight.copy_(source.weight)
            if source.bias is not None:
                plain.bias.copy_(source.bias)
        plain.qconfig = per_channel_dynamic_qconfig  # type: ignore[assignment]  # read by from_float
        with warnings.catch_warnings():  # torch.ao.quantization's deprecation notice, once per layer
            warnings.simplefilter("ignore")
            quantised = DynamicLinear.from_float(plain)
        parent, _, leaf = name.rpartition(".")
        setattr(gen.get_submodule(parent) if parent else gen, leaf, quantised)


def is_int8_copy(gen: Any) -> bool:
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    return any(isinstance(m, DynamicLinear) for m in gen.modules())
