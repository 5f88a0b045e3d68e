"""Golden prompts: what each backbone's chat template must render for one fixed conversation.

``python -m training.preflight`` renders the run's tokenizer template on
:data:`CONVERSATION` (``add_generation_prompt=True``) and compares it with the string for
the template family (``training/engines/verl/checks/backbones.py``'s ``chat_template``). The conversation has
an earlier assistant turn that carries a ``<think>`` block: Qwen3's template must drop it
from turns before the last user message, and ``enable_thinking=False`` must pre-fill an
empty think block. A family without a golden string here is reported SKIP, not guessed.
"""

from __future__ import annotations

CONVERSATION: tuple[dict[str, str], ...] = (
    {"role": "system", "content": "You write SQLite queries."},
    {"role": "user", "content": "How many singers are there?"},
    {"role": "assistant", "content": "<think>\nCount the rows of singer.\n</think>\n\nSELECT count(*) FROM singer"},
    {"role": "user", "content": "And how many concerts?"},
)

_CHATML_TURNS = (
    "<|im_start|>system\nYou write SQLite queries.<|im_end|>\n"
    "<|im_start|>user\nHow many singers are there?<|im_end|>\n"
    "<|im_start|>assistant\n{earlier}<|im_end|>\n"
    "<|im_start|>user\nAnd how many concerts?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
_EARLIER_WITH_THINKING = "<think>\nCount the rows of singer.\n</think>\n\nSELECT count(*) FROM singer"

GOLDEN: dict[str, dict[str, str]] = {
    # Qwen3: thinking of earlier turns stripped; enable_thinking=False pre-fills an empty block.
    "chatml (qwen3, <think>)": {
        "enable_thinking=True": _CHATML_TURNS.format(earlier="SELECT count(*) FROM singer"),
        "enable_thinking=False": _CHATML_TURNS.format(earlier="SELECT count(*) FROM singer")
        + "<think>\n\n</think>\n\n",
    },
    # Plain ChatML (Qwen2.5-Coder, the embedded SmolLM2 with a system message given): the
    # assistant turn is kept as written and enable_thinking is ignored.
    "chatml": {
        "enable_thinking=True": _CHATML_TURNS.format(earlier=_EARLIER_WITH_THINKING),
        "enable_thinking=False": _CHATML_TURNS.format(earlier=_EARLIER_WITH_THINKING),
    },
}
"""template family -> render variant -> the exact prompt text."""
