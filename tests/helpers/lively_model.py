"""The tiny model (tests/helpers/tiny_model.py) with larger random weights.

At the default init its greedy text is newlines whatever the prompt, which makes any
greedy comparison easy to pass; with weights of std 0.3 the greedy text depends on the
conversation.
"""

from __future__ import annotations

from typing import Any

from tests.helpers.tiny_model import tiny_model


def lively_model(std: float = 0.3) -> Any:
    import torch

    model = tiny_model()
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.normal_(0.0, std)
    return model
