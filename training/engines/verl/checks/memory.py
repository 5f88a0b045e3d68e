"""Per-GPU memory estimate of a veRL run, the checks that refuse a run that cannot fit,
and the in-flight episode count against vLLM's sequence slots.

Everything is read from the finished veRL tree (so ``verl.*`` overrides count), the
model's :class:`~training.engines.verl.checks.backbones.Architecture` and the GPU's memory (the ``hardware``
group). The arithmetic is an estimate in the style of Korthikanti et al. 2022
("Reducing Activation Recomputation in Large Transformer Models"): it counts the big
tensors and leaves out the small ones (norms, biases, rotary tables, allocator slack), so
each check keeps ``HEADROOM`` of the GPU free. What veRL 0.9.1 does that the terms follow:

- the actor is an FSDP model with fp32 master weights (``fsdp_config.model_dtype: fp32``),
  bf16 compute, fp32 gradients and AdamW's two fp32 moments: 16 bytes per parameter,
  sharded over every GPU. ``param_offload``/``optimizer_offload`` move them to CPU
  *between* phases (veRL's train-mode context loads them back for the update), so they
  help the rollout phase, when vLLM shares the GPU, not the update's peak;
- with LoRA (``lora_rank > 0``) the base weights are frozen: 4 bytes per parameter sharded,
  gradients and AdamW for the adapter only, no reference model (:mod:`.lora_memory`);
- the reference model runs with FSDP ``CPUOffload(offload_params=True)`` (veRL forces it
  for forward-only models): it costs no GPU memory at rest;
- decoder layers are FSDP units (gathered one at a time, bf16, with the next prefetched);
  the embeddings and ``lm_head`` sit in the root unit, gathered for the whole pass;
- micro-batches are packed by tokens (``use_dynamic_bsz``): a GPU holds at most
  ``ppo_max_token_len_per_gpu`` tokens in the update and ``log_prob_max_token_len_per_gpu``
  in a log-prob pass; Ulysses sequence parallelism of size ``sp`` lets one sequence of
  ``sp x budget`` tokens spread over ``sp`` GPUs (veRL packs ``budget x sp`` per group);
- logits are ``tokens x vocab``: bf16 out of ``lm_head``, their gradient, and without
  flash-attn's cross-entropy kernel (installed with flash-attn; assumed present exactly
  when ``attn_implementation=flash_attention_2``) the saved log-softmax; entropy (always
  computed in the log-prob pass for veRL's ``actor/entropy`` metric, in the update only
  when ``entropy_coeff > 0``) takes fp32 softmax rows: all rows, or
  ``entropy_from_logits_chunk_size`` rows with ``entropy_from_logits_with_chunking``;
- with sdpa, packed sequences carry a boolean block-diagonal mask of ``tokens**2`` bytes;
- vLLM takes ``gpu_memory_utilization x capacity`` and refuses to start when less is
  free; inside it: bf16 weights / TP, a profile-run peak, then the KV cache. A sliding
  window layer caches at most ``sliding_window`` tokens per sequence; vLLM refuses a
  ``max_model_len`` whose KV cache does not fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from training.engines.verl.checks.lora_memory import adapter_params

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from training.engines.verl.checks.backbones import Architecture

GIB = 2**30
BF16, FP32 = 2, 4
ADAM_BYTES = 8  # two fp32 moments per parameter
HEADROOM = 0.10  # of the GPU kept free for what the estimate leaves out (allocator slack, NCCL buffers)
CUDA_CONTEXT = 3 * GIB // 2  # per process on the GPU (the FSDP worker's; vLLM's is inside its share)
VLLM_FIXED = 3 * GIB  # vLLM's CUDA graphs and non-torch memory beside weights and activations


# ----------------------------------------------------------------------------- the model's sizes


def layer_params(a: Architecture, global_layer: bool) -> int:
    """Weights of one decoder layer: q, k, v, o projections and the gated MLP (norms left out)."""
    kv_heads, head_dim = _attention_dims(a, global_layer)
    q = a.hidden_size * a.num_attention_heads * head_dim
    kv = a.hidden_size * kv_heads * head_dim * (1 if global_layer and a.global_k_eq_v else 2)
    o = a.num_attention_heads * head_dim * a.hidden_size
    return q + kv + o + 3 * a.hidden_size * a.intermediate_size


def embedding_params(a: Architecture) -> int:
    """``embed_tokens`` plus an untied ``lm_head``, plus Gemma 4 E-models' per-layer embeddings."""
    per_layer = (a.per_layer_vocab_size or a.vocab_size) * a.num_hidden_layers * a.per_layer_input_size
    return a.vocab_size * a.hidden_size * (1 if a.tie_word_embeddings else 2) + per_layer


def parameter_count(a: Architecture) -> int:
    return a.sliding_layers * layer_params(a, False) + a.global_layers * layer_params(a, True) + embedding_params(a)


def _attention_dims(a: Architecture, global_layer: bool) -> tuple[int, int]:
    if global_layer and a.sliding_layers:
        return a.global_key_value_heads or a.num_key_value_heads, a.global_head_dim or a.head_dim
    return a.num_key_value_heads, a.head_dim


def layer_activation_elements(a: Architecture, global_layer: bool) -> int:
    """Values one layer keeps per token for its backward: the two norm inputs and the
    residual (3h), q and the attention output (2 q_dim), k and v (2 kv_dim), and the MLP's
    gate, up, activation and product (4 intermediate)."""
    kv_heads, head_dim = _attention_dims(a, global_layer)
    q_dim, kv_dim = a.num_attention_heads * head_dim, kv_heads * head_dim
    return 3 * a.hidden_size + 2 * q_dim + 2 * kv_dim + 4 * a.intermediate_size


def kv_bytes(a: Architecture, tokens: int, tp: int) -> int:
    """bf16 K and V of one sequence of ``tokens`` tokens on one GPU of a TP group (vLLM
    stores K and V apart, shared values included; a KV head is replicated when TP > heads)."""
    total = 0
    for global_layer, layers in ((False, a.sliding_layers), (True, a.global_layers)):
        kv_heads, head_dim = _attention_dims(a, global_layer)
        cached = tokens if global_layer or not a.sliding_window else min(tokens, a.sliding_window)
        total += layers * 2 * max(1, kv_heads // tp) * head_dim * BF16 * cached
    return total


# ----------------------------------------------------------------------------- what the veRL tree says


@dataclass(frozen=True)
class Knobs:
    """The settings of a veRL tree the estimate reads."""

    gpus: int
    tp: int
    sp: int
    ppo_tokens: int
    log_prob_tokens: int
    max_model_len: int
    gradient_checkpointing: bool
    entropy_chunk: int | None  # rows per entropy chunk; None = all rows at once
    entropy_in_update: bool
    param_offload: bool
    optimizer_offload: bool
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    attention: str
    lora_rank: int = 0  # actor_rollout_ref.model.lora_rank: > 0 trains an adapter on frozen weights

    @classmethod
    def from_verl(cls, cfg: DictConfig) -> Knobs:
        arr = cfg.actor_rollout_ref
        actor, rollout, fsdp = arr.actor, arr.rollout, arr.actor.fsdp_config
        chunking = bool(actor.get("entropy_from_logits_with_chunking", False))
        attention = (arr.model.get("override_config") or {}).get("attn_implementation", "flash_attention_2")
        return cls(
            gpus=int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes),
            tp=int(rollout.tensor_model_parallel_size),
            sp=int(fsdp.get("ulysses_sequence_parallel_size", 1) or 1),
            ppo_tokens=int(actor.ppo_max_token_len_per_gpu),
            log_prob_tokens=int(rollout.log_prob_max_token_len_per_gpu),
            max_model_len=int(rollout.max_model_len or rollout.prompt_length + rollout.response_length),
            gradient_checkpointing=bool(arr.model.enable_gradient_checkpointing),
            entropy_chunk=int(actor.get("entropy_from_logits_chunk_size", 2048)) if chunking else None,
            entropy_in_update=float(actor.entropy_coeff) > 0,
            param_offload=bool(fsdp.param_offload),
            optimizer_offload=bool(fsdp.optimizer_offload),
            gpu_memory_utilization=float(rollout.gpu_memory_utilization),
            max_num_seqs=int(rollout.max_num_seqs),
            max_num_batched_tokens=int(rollout.max_num_batched_tokens),
            attention=str(attention),
            lora_rank=int(arr.model.get("lora_rank", 0) or 0),
        )


# ----------------------------------------------------------------------------- the estimate


@dataclass(frozen=True)
class Estimate:
    """Bytes per GPU, phase by phase (see the module docstring for each term)."""

    parameters: int
    weights: int  # fp32 master weights, sharded (with LoRA: the frozen base and the adapter)
    grads: int  # fp32, sharded
    optimizer: int  # AdamW moments, sharded
    gathered: int  # bf16 root unit (embeddings, lm_head) + two decoder layers, fp32 grads of the largest
    activations: int  # update, at ppo_max_token_len_per_gpu tokens
    logits: int  # update
    mask: int  # sdpa's packed mask, update
    log_prob_pass: int  # activations + logits of one log-prob micro-batch (no grad)
    resident_in_rollout: int  # training state left on the GPU while vLLM runs (offload moves it)
    vllm_share: int  # gpu_memory_utilization x capacity (0 when the capacity is unknown)
    vllm_weights: int
    vllm_overhead: int
    kv_cache: int  # what is left for the KV cache inside vLLM's share, per GPU
    kv_per_sequence: int  # one max_model_len sequence, per GPU of a TP group
    adapter_parameters: int = 0  # LoRA's trainable weights (0: full fine-tuning)

    @property
    def static(self) -> int:
        return self.weights + self.grads + self.optimizer + self.gathered

    @property
    def update_peak(self) -> int:
        return self.static + self.activations + self.logits + self.mask + CUDA_CONTEXT

    @property
    def log_prob_peak(self) -> int:
        return self.weights + self.gathered + self.log_prob_pass + CUDA_CONTEXT

    @property
    def full_sequences(self) -> int:
        """max_model_len sequences the KV cache holds at once per replica."""
        return self.kv_cache // self.kv_per_sequence if self.kv_per_sequence > 0 and self.kv_cache > 0 else 0


def estimate(a: Architecture, k: Knobs, capacity: int | None) -> Estimate:
    """The per-GPU estimate for ``k`` on a GPU of ``capacity`` bytes (None: unknown)."""
    params, adapter = parameter_count(a), adapter_params(a, k.lora_rank)
    shard = math.ceil((params + adapter) / k.gpus)
    trained = math.ceil(adapter / k.gpus) if k.lora_rank > 0 else shard  # what has gradients and moments
    largest = max(layer_params(a, False) if a.sliding_layers else 0, layer_params(a, True))
    unit_grads = 0 if k.lora_rank > 0 else FP32  # fp32 gradients of a gathered unit (frozen under LoRA)
    gathered = embedding_params(a) * (BF16 + unit_grads) + 2 * largest * BF16 + largest * unit_grads
    vllm_share = int(k.gpu_memory_utilization * capacity) if capacity else 0
    vllm_weights = math.ceil((params + adapter) * BF16 / k.tp)
    vllm_overhead = VLLM_FIXED + _vllm_activations(a, k)
    return Estimate(
        parameters=params,
        weights=shard * FP32,
        grads=trained * FP32,
        optimizer=trained * ADAM_BYTES,
        gathered=gathered,
        activations=_update_activations(a, k),
        logits=_update_logits(a, k),
        mask=k.ppo_tokens**2 if k.attention == "sdpa" else 0,
        log_prob_pass=_log_prob_pass(a, k),
        resident_in_rollout=(0 if k.param_offload else shard * FP32)
        + (0 if k.optimizer_offload else trained * ADAM_BYTES),
        vllm_share=vllm_share,
        vllm_weights=vllm_weights,
        vllm_overhead=vllm_overhead,
        kv_cache=vllm_share - vllm_weights - vllm_overhead,
        kv_per_sequence=kv_bytes(a, k.max_model_len, k.tp),
        adapter_parameters=adapter,
    )


def _layer_kinds(a: Architecture) -> list[tuple[bool, int]]:
    return [(g, n) for g, n in ((False, a.sliding_layers), (True, a.global_layers)) if n]


def _update_activations(a: Architecture, k: Knobs) -> int:
    """Checkpointing keeps each layer's input (h per token) and recomputes one layer at a
    time (its values and their gradients: twice one layer); without it every layer keeps
    all its values, plus one layer's gradients."""
    t = k.ppo_tokens
    one_layer = max(layer_activation_elements(a, g) for g, _ in _layer_kinds(a)) * t * BF16
    if k.gradient_checkpointing:
        return a.num_hidden_layers * a.hidden_size * t * BF16 + 2 * one_layer
    every = sum(n * layer_activation_elements(a, g) for g, n in _layer_kinds(a)) * t * BF16
    return every + one_layer


def _entropy_rows(k: Knobs, tokens: int) -> int:
    return min(tokens, k.entropy_chunk) if k.entropy_chunk else tokens


def _update_logits(a: Architecture, k: Knobs) -> int:
    t, v = k.ppo_tokens, a.vocab_size
    flash_ce = k.attention == "flash_attention_2"
    out = 2 * t * v * BF16 + (0 if flash_ce else t * v * BF16)  # logits, their gradient, saved log-softmax
    if k.entropy_in_update:
        out += _entropy_rows(k, t) * v * FP32
    return out


def _log_prob_pass(a: Architecture, k: Knobs) -> int:
    """No gradient: one layer's values, the logits and the entropy's fp32 softmax and product."""
    t, v = k.log_prob_tokens, a.vocab_size
    layer = max(layer_activation_elements(a, g) for g, _ in _layer_kinds(a)) * t * BF16
    mask = t**2 if k.attention == "sdpa" else 0
    return layer + mask + t * v * BF16 + 2 * _entropy_rows(k, t) * v * FP32


def _vllm_activations(a: Architecture, k: Knobs) -> int:
    """vLLM's profile run: one step of ``max_num_batched_tokens`` tokens through the widest
    layer (its MLP split over TP) and fp32 logits for ``max_num_seqs`` sampled rows."""
    per_token = (4 * a.hidden_size + 2 * a.intermediate_size // k.tp) * BF16
    return k.max_num_batched_tokens * per_token + k.max_num_seqs * a.vocab_size * FP32


# ----------------------------------------------------------------------------- verdicts


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def describe(e: Estimate, k: Knobs, capacity: int | None) -> list[str]:
    """The estimate as lines for a dry run."""
    cap = f" of {gib(capacity)}" if capacity else " (capacity unknown: hardware=cpu)"
    rollout = (
        f"rollout, per GPU: training state kept {gib(e.resident_in_rollout)} (param offload "
        f"{'on' if k.param_offload else 'off'}, optimizer offload {'on' if k.optimizer_offload else 'off'}) "
        f"+ vLLM {k.gpu_memory_utilization:g} x capacity = {gib(e.vllm_share)}: weights {gib(e.vllm_weights)} "
        f"(TP {k.tp}) + overhead {gib(e.vllm_overhead)} + KV cache {gib(e.kv_cache)} = "
        f"{e.full_sequences} sequence(s) of {k.max_model_len} tokens per replica ({gib(e.kv_per_sequence)} each)"
        if capacity
        else f"rollout, per GPU: training state kept {gib(e.resident_in_rollout)}; vLLM weights {gib(e.vllm_weights)} "
        f"(TP {k.tp}); one {k.max_model_len}-token sequence's KV {gib(e.kv_per_sequence)} (no GPU to size vLLM's share)"
    )
    lora = (
        f"; LoRA rank {k.lora_rank}: {e.adapter_parameters / 1e6:.0f}M adapter parameters trained, the rest frozen"
        if k.lora_rank > 0
        else ""
    )
    return [
        f"model: {e.parameters / 1e9:.2f}B parameters; {k.gpus} GPU(s), "
        f"FSDP shards of {math.ceil(e.parameters / k.gpus) / 1e9:.2f}B{lora}",
        f"update, per GPU{cap}: weights {gib(e.weights)} + grads {gib(e.grads)} + AdamW {gib(e.optimizer)} "
        f"+ gathered units {gib(e.gathered)} + activations {gib(e.activations)} ({k.ppo_tokens} tokens, "
        f"checkpointing {'on' if k.gradient_checkpointing else 'off'}, Ulysses {k.sp}) + logits {gib(e.logits)}"
        + (f" + sdpa mask {gib(e.mask)}" if e.mask else "")
        + f" = {gib(e.update_peak)}",
        f"log-prob pass, per GPU: {gib(e.log_prob_peak)} ({k.log_prob_tokens} tokens, entropy "
        + (f"in chunks of {k.entropy_chunk})" if k.entropy_chunk else "unchunked)"),
        rollout,
    ]


def failures(e: Estimate, k: Knobs, capacity: int | None) -> list[str]:
    """What cannot fit a GPU of ``capacity`` bytes, each with what to change (none when the
    capacity is unknown)."""
    if not capacity:
        return []
    usable = capacity * (1 - HEADROOM)
    out = []
    if e.update_peak > usable:
        out.append(
            f"the actor update needs ~{gib(e.update_peak)} per GPU, over {gib(usable)} usable of {gib(capacity)}: "
            f"lower hardware.tokens_per_gpu ({k.ppo_tokens} now, >= max_model_len / Ulysses size), raise "
            f"hardware.ulysses_sp (needs flash-attn), keep hardware.gradient_checkpointing=true, or "
            + _more_gpus(e, k, usable)
        )
    if e.log_prob_peak > usable:
        out.append(
            f"a log-prob pass needs ~{gib(e.log_prob_peak)} per GPU, over {gib(usable)}: lower "
            f"hardware.log_prob_tokens_per_gpu ({k.log_prob_tokens} now) or set hardware.entropy_chunking=true"
        )
    free_for_vllm = capacity - e.resident_in_rollout - CUDA_CONTEXT
    if e.vllm_share > free_for_vllm:
        most = math.floor(free_for_vllm / capacity * 100) / 100
        lower = f", or hardware.gpu_memory_utilization <= {most:.2f}" if most >= 0.1 else ""
        out.append(
            f"vLLM asks for gpu_memory_utilization {k.gpu_memory_utilization:g} x {gib(capacity)} = "
            f"{gib(e.vllm_share)} but the training state left on the GPU ({gib(e.resident_in_rollout)}) leaves "
            f"{gib(max(free_for_vllm, 0))}: "
            f"vLLM refuses to start. Set hardware.param_offload=true and hardware.optimizer_offload=true{lower}"
        )
    if e.kv_cache < e.kv_per_sequence:
        out.append(
            f"vLLM's KV cache ({gib(max(e.kv_cache, 0))} per GPU after {gib(e.vllm_weights)} of weights at TP {k.tp}) "
            f"cannot hold one {k.max_model_len}-token sequence ({gib(e.kv_per_sequence)}): vLLM refuses to start. "
            "Raise hardware.gpu_memory_utilization or hardware.tensor_parallel_size, or shorten "
            "rollout.max_prompt_tokens + rollout.max_response_tokens"
        )
    return out


def _more_gpus(e: Estimate, k: Knobs, usable: float) -> str:
    """The GPU count that shrinks the sharded state (16 B/parameter, 4 under LoRA) enough, as a fix."""
    per_token_part = e.gathered + e.activations + e.logits + e.mask + CUDA_CONTEXT
    room = usable - per_token_part
    if room <= 0:
        return "use a smaller model: even unsharded, one micro-batch does not fit"
    state = e.parameters * FP32 + e.adapter_parameters * (2 * FP32 + ADAM_BYTES) if k.lora_rank > 0 else 0
    need = math.ceil((state or e.parameters * (2 * FP32 + ADAM_BYTES)) / room)
    lora = "" if k.lora_rank > 0 else ", train LoRA adapters only (model.lora.rank=32: 4 B/parameter instead of 16)"
    return (
        f"add GPUs: the {gib(e.static - e.gathered)} of sharded weights, gradients and AdamW shrink with "
        f"their number ({k.gpus} now; ~{need} needed at these budgets, hardware.nnodes=N){lora}, or use a smaller model"
    )


# ----------------------------------------------------------------------------- episodes in flight


@dataclass(frozen=True)
class InFlight:
    """Episodes one step runs at once against vLLM's sequence slots.

    veRL 0.9.1's agent-loop workers start every sample of a dispatched batch at once
    (``AgentLoopWorkerTQ.generate_sequences`` makes one task per prompt, ``rollout.n``
    sessions each), so without a cap all ``questions x rollout.n`` episodes are live; the
    project's agent loop caps live episodes per worker at ``per_worker_cap``
    (``sqlagent.max_concurrent_episodes``; None: no cap). An episode has at most one
    generation request at a time (DualSQL's two roles run one after the other).
    """

    questions: int  # B x K with the papers' dynamic sampling, else B
    group_size: int
    workers: int
    per_worker_cap: int | None
    replicas: int
    max_num_seqs: int

    @property
    def episodes(self) -> int:
        return self.questions * self.group_size

    @property
    def live(self) -> int:
        """Episodes generating at once: all of them, or the workers' caps when lower."""
        return self.episodes if self.per_worker_cap is None else min(self.episodes, self.workers * self.per_worker_cap)

    @property
    def slots(self) -> int:
        return self.replicas * self.max_num_seqs

    @classmethod
    def from_verl(cls, cfg: DictConfig) -> InFlight:
        rollout, ns = cfg.actor_rollout_ref.rollout, cfg.get("sqlagent") or {}
        sampling = ns.get("dynamic_sampling") or {}
        oversample = int(sampling.get("oversample", 1)) if sampling.get("enable") else 1
        gpus = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
        cap = ns.get("max_concurrent_episodes")
        return cls(
            questions=int(cfg.data.train_batch_size) * oversample,
            group_size=int(rollout.n),
            workers=int(rollout.agent.num_workers),
            per_worker_cap=int(cap) if cap else None,
            replicas=max(1, gpus // int(rollout.tensor_model_parallel_size)),
            max_num_seqs=int(rollout.max_num_seqs),
        )


def per_worker_cap(questions: int, group_size: int, workers: int, replicas: int, max_num_seqs: int) -> int | None:
    """The cap that keeps live episodes within vLLM's slots: None when every episode of a
    step fits already, else the slots split evenly over the agent-loop workers."""
    if questions * group_size <= replicas * max_num_seqs:
        return None
    return max(1, (replicas * max_num_seqs) // workers)


def in_flight_failures(f: InFlight) -> list[str]:
    if f.live <= f.slots:
        return []
    if f.per_worker_cap is not None:
        fits = max(0, f.slots // f.workers)
        return [
            f"{f.workers} agent-loop workers x sqlagent.max_concurrent_episodes {f.per_worker_cap} = {f.live} live "
            f"episodes exceed vLLM's {f.replicas} replica(s) x max_num_seqs {f.max_num_seqs} = {f.slots} slots: set "
            f"+verl.sqlagent.max_concurrent_episodes={fits} or raise hardware.max_num_seqs"
        ]
    return [
        f"{f.questions} questions x G={f.group_size} = {f.episodes} episodes in flight exceed vLLM's {f.replicas} "
        f"replica(s) x max_num_seqs {f.max_num_seqs} = {f.slots} slots: lower algorithm.dynamic_sampling.oversample "
        f"or algorithm.batch_size, raise hardware.max_num_seqs, or cap live episodes per agent-loop worker with "
        f"+verl.sqlagent.max_concurrent_episodes={max(1, f.slots // f.workers)}"
    ]


# ----------------------------------------------------------------------------- one report


@dataclass(frozen=True)
class SizingReport:
    lines: tuple[str, ...]
    failures: tuple[str, ...]
    estimate: Estimate | None


def size_run(
    cfg: DictConfig, a: Architecture | None, origin: str, capacity_gib: float | None, hardware: str
) -> SizingReport:
    """The estimate and every verdict for the veRL tree ``cfg`` on ``hardware``."""
    capacity = int(capacity_gib * GIB) if capacity_gib else None
    flight = InFlight.from_verl(cfg)
    cap = f", capped at {flight.per_worker_cap} per agent-loop worker" if flight.per_worker_cap else ""
    lines = [
        f"hardware={hardware}: episodes in flight {flight.episodes} ({flight.questions} questions x "
        f"G={flight.group_size}), live {flight.live}{cap}; vLLM slots {flight.replicas} replica(s) x "
        f"max_num_seqs {flight.max_num_seqs} = {flight.slots}"
    ]
    fails = in_flight_failures(flight)
    if not capacity:  # hardware=cpu sizes nothing: say what a GPU run would refuse
        lines += [f"note (hardware=cpu, not enforced): {item}" for item in fails]
        fails = []
    if a is None:
        return SizingReport(tuple(lines + [f"memory estimate skipped: {origin}"]), tuple(fails), None)
    knobs = Knobs.from_verl(cfg)
    est = estimate(a, knobs, capacity)
    lines += describe(est, knobs, capacity) + [f"model sizes from {origin}"]
    return SizingReport(tuple(lines), tuple(fails + failures(est, knobs, capacity)), est)


def plain_numbers(e: Estimate) -> dict[str, Any]:
    """The estimate in GiB (tests and logs)."""
    return {name: round(getattr(e, name) / GIB, 2) for name in e.__dataclass_fields__ if name != "parameters"}
