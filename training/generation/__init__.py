"""Generation, the one interface training and evaluation both use: loading the policy model
(the embedded default or any HF model), batched generation over it, and the text sources
(a local model with its own chat template, an OpenAI-compatible endpoint) that play a
design's episodes through the same rollout driver.

- ``loading``: ``load_model``, ``prepare_tokenizer``, ``resolve_model_path``, ``autocast_for``;
- ``hf``: ``batched_generate`` and ``hf_generate`` (the driver's ``GenerateFn``);
- ``cpu_attention``: faster CPU decoding for a generation copy;
- ``sources`` and ``endpoint``: ``PolicySource``, ``LocalChatSource``, ``EndpointSource``;
- ``text_episodes``: the scheduler's text front ends (``run_source_episodes``, rounds and
  concurrent requests).
"""

from __future__ import annotations

from training.generation.cpu_attention import use_hybrid_cpu_attention
from training.generation.endpoint import (
    EndpointSource,
    EndpointSpec,
    RequestFailed,
    endpoint_from_mapping,
    reasoning_tag,
)
from training.generation.hf import autocast_context, batched_generate, hf_generate
from training.generation.loading import (
    LoadedModel,
    ModelLoadError,
    autocast_for,
    embedded_checkpoint_dir,
    load_model,
    prepare_tokenizer,
    resolve_model_path,
)
from training.generation.sources import LocalChatSource, PolicySource, TextSource, ask_source
from training.generation.text_episodes import (
    ConcurrentTextGenerate,
    EpisodeBatch,
    questions_per_batch,
    run_concurrent_episodes,
    run_source_episodes,
    run_text_episodes,
)

__all__ = [
    "ConcurrentTextGenerate",
    "EndpointSource",
    "EndpointSpec",
    "EpisodeBatch",
    "LoadedModel",
    "LocalChatSource",
    "ModelLoadError",
    "PolicySource",
    "RequestFailed",
    "TextSource",
    "ask_source",
    "autocast_context",
    "autocast_for",
    "batched_generate",
    "embedded_checkpoint_dir",
    "endpoint_from_mapping",
    "hf_generate",
    "load_model",
    "prepare_tokenizer",
    "questions_per_batch",
    "reasoning_tag",
    "resolve_model_path",
    "run_concurrent_episodes",
    "run_source_episodes",
    "run_text_episodes",
    "use_hybrid_cpu_attention",
]
