"""The GPU smoke test's sizes and policy, importable on CPU (tests/training/engines/verl/checks/test_rules.py
runs the engine's start-up rules on exactly these, for 1 and 8 GPUs)."""

from __future__ import annotations

from pathlib import Path

SIZES = (
    "algorithm.batch_size=2",
    "algorithm.group_size=4",
    "algorithm.mini_batches=1",
    "data.limit=4",
    "data.eval_limit=2",
    "trainer.save_every=1",
    "rollout.max_new_tokens=64",
    "rollout.max_response_tokens=2048",
    "rollout.max_prompt_tokens=12288",
)
"""2 questions x G=4 = 8 rows per mini-batch: divisible over 1, 2, 4 and 8 GPUs; 4 training
questions = 2 steps per epoch; 12,288 + 2,048 tokens fit the policy's 16,384 positions."""


def save_tiny_policy(path: Path) -> Path:
    """A random 2-layer Qwen2 with head_dim 64 (a size every vLLM attention backend takes)
    and a 16K context (the tiny tokenizer spends ~1 token per 2-3 characters of prompt)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tests.helpers.tiny_model import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=16384,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    tokenizer.save_pretrained(path)
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path
