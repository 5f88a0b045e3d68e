"""The ``local`` engine: one process, CPU or one GPU, a HF transformers policy.

A step: draw B questions (B*K with dynamic sampling), roll G episodes each through the
rollout driver with batched ``generate``, score them, drop zero-variance groups (dynamic
sampling), turn rewards into per-track advantages, then one optimizer pass over the
buffer (``algorithm.mini_batches`` optimizer steps, gradient accumulation over
micro-batches). Old log-probs come from a forward pass (with one mini-batch the policy
has not moved since the rollout, so they are the detached log-probs of the update's own
forward pass); reference log-probs only while beta > 0. Checkpoints every N steps;
``resume=true`` continues exactly.

With ``stage.warm_start.enable`` (on in the CPU laptop profile) the run first fine-tunes
on demonstrations of the design's protocol (local_warm_start.py), then runs GRPO from
there; the summary reports greedy EX before, after the warm start and after RL.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from training.config import TrainConfig, to_yaml_tree, warmup_steps
from training.engines import local_policy as lp
from training.engines import local_state as st
from eval.units import pct
from training.engines.local_batch import CandidatePool, StepBuffer, build_buffer, unkept_to_return
from training.kl import KLSchedule
from tools.errors import ConfigError

Say = Callable[[str], None]

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
CONFIG = "config.yaml"
FINAL_DIR = "final"


def describe(cfg: TrainConfig) -> str:
    """The effective configuration the local engine runs, as YAML."""
    from omegaconf import OmegaConf

    header = f"# effective configuration: engine=local device={cfg.engine.device}\n"
    return header + OmegaConf.to_yaml(OmegaConf.create(to_yaml_tree(cfg)))


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run ``cfg`` to completion and return the summary (also written to summary.json)."""
    quiet_libraries()
    return LocalTrainer(cfg).fit()


def quiet_libraries() -> None:
    """veRL warns at import that no GPU and no Megatron/torchtitan/... engines exist, and
    transformers draws a progress bar for every weights file it reads or writes (one per
    checkpoint); the local engine only uses veRL's loss functions, so all of it is noise
    on its console and in run.log."""
    import logging
    import os
    import warnings

    os.environ.setdefault("VERL_LOGGING_LEVEL", "ERROR")
    warnings.filterwarnings("ignore", message=r".*engine is not available.*", category=UserWarning)
    warnings.filterwarnings("ignore", message=r".*Ray state API is no longer experimental.*")
    logging.getLogger("verl").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


# ----------------------------------------------------------------------------- timing

class Stopwatch:
    """Accumulates named durations for the step-time breakdown."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.totals[name] = self.totals.get(name, 0.0) + seconds

    def measure(self, name: str) -> "_Timer":
        return _Timer(self, name)


@dataclass
class _Timer:
    watch: Stopwatch
    name: str
    start: float = 0.0

    def __enter__(self) -> "_Timer":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.watch.add(self.name, time.perf_counter() - self.start)


# ----------------------------------------------------------------------------- trainer

@dataclass
class TrainerInputs:
    """What a trainer can be given instead of loading it (tests, benchmarks)."""

    model: Any = None
    tokenizer: Any = None
    model_source: str = ""
    train_examples: Sequence[Any] | None = None
    eval_examples: Sequence[Any] | None = None
    generate: Callable[..., Any] | None = None  # a GenerateFn replacing the model's generate


@dataclass
class LocalTrainer:
    """Holds the policy, optimizer, data and loggers of one run."""

    cfg: TrainConfig
    inputs: TrainerInputs = field(default_factory=TrainerInputs)
    say: Say = print

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.device = cfg.engine.device if cfg.engine.device != "auto" else "cpu"
        st.seed_everything(cfg.seed)
        self._load_model()
        self._load_data()
        self._build_components()
        self.step = 0
        self.watch = Stopwatch()
        self.wandb_id: str | None = None
        self.logger: Any = None
        self._samples: Any = None  # training.records.SampleWriter, made at the first step

    # ------------------------------------------------------------------ setup
    def _load_model(self) -> None:
        from training.model import autocast_for, load_model, prepare_tokenizer

        given = self.inputs
        if given.model is not None:
            self.model, self.tokenizer = given.model.to(self.device), prepare_tokenizer(given.tokenizer)
            self.model_source = given.model_source or "given"
        else:
            path = self.cfg.stage.init_from or self.cfg.model.path
            loaded = load_model(path, self.device, say=self.say, trust_remote_code=self.cfg.model.trust_remote_code)
            self.model, self.tokenizer, self.model_source = loaded.model, loaded.tokenizer, loaded.source
        self.model.train()
        if self.cfg.model.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.autocast = autocast_for(self.cfg.model.autocast, self.device)
        self.gen_model = self._generation_copy()
        self.say(f"[model] {self.model_source}: {sum(p.numel() for p in self.model.parameters()) / 1e6:.1f}M "
                 f"parameters, fp32 weights, autocast={self.autocast}")

    def _generation_copy(self) -> Any:
        """The weights ``generate`` runs on: a bf16 copy where bf16 is native, else the policy.

        Measured on 2 shared cores (8 rows, 600-token prompts): bf16 weights decode at
        0.10 s/step and prefill in 6 s, fp32 at 1.03 s/step and 23 s; autocast over fp32
        weights was slower still (it re-casts every weight at every step). The copy is
        refreshed after every optimizer step (``_sync_generation_copy``); log-probs and
        the update use the fp32 master weights, as veRL does with vLLM + FSDP.
        """
        import copy

        from training.model import autocast_dtype

        mode = self.cfg.model.generation_dtype
        native = autocast_dtype(self.device) is not None
        if mode == "fp32" or (mode == "auto" and not native):
            return self.model
        gen = copy.deepcopy(self.model).to(torch.bfloat16).eval()
        for p in gen.parameters():
            p.requires_grad_(False)
        if self.device == "cpu" and self.cfg.model.decode_attention == "auto":
            from training.cpu_attention import use_hybrid_cpu_attention

            use_hybrid_cpu_attention(gen)
        return gen

    def _sync_generation_copy(self) -> None:
        if self.gen_model is not self.model:
            with torch.no_grad():
                for dst, src in zip(self.gen_model.parameters(), self.model.parameters()):
                    dst.copy_(src)

    def _load_data(self) -> None:
        from eval.data import load_examples

        d = self.cfg.data
        if self.inputs.train_examples is not None:
            self.train_examples = list(self.inputs.train_examples)
        else:
            self.train_examples = load_examples(kind=d.kind, root=d.root, split=d.split,
                                                drop_failing_gold=d.drop_failing_gold, limit=d.limit)
        if self.inputs.eval_examples is not None:
            self.eval_examples = list(self.inputs.eval_examples)
        else:
            self.eval_examples = load_examples(kind=d.kind, root=d.root, split=d.eval_split,
                                               drop_failing_gold=d.drop_failing_gold, limit=None)
        from training.rollout_setup import fixed_subset

        self.eval_examples = fixed_subset(self.eval_examples, d.eval_limit, self.cfg.seed)
        if not self.train_examples:
            raise ConfigError(f"data split {d.split!r} of {d.kind!r} has no examples; check data.root / data.limit")
        self.say(f"[data] {len(self.train_examples)} training examples ({d.kind}/{d.split}), "
                 f"{len(self.eval_examples)} held-out ({d.kind}/{d.eval_split})")

    def _build_components(self) -> None:
        from agents import agent_options, make_agent
        from training.rewards import get_reward
        from training.rollout_setup import hf_generate, model_context, rollout_limits, sampling_params

        cfg = self.cfg
        options = dict(cfg.agent.options)
        accepted = agent_options(cfg.agent.name)
        if "few_shot_pool" in accepted:
            options["few_shot_pool"] = tuple(self.train_examples)
        self.agent = make_agent(cfg.agent.name, **options)
        eval_options = dict(options, inference=True) if "inference" in accepted else options
        self.eval_agent = make_agent(cfg.agent.name, **eval_options)
        self.reward_fn = get_reward(cfg.reward.name, exec_metric=cfg.reward.exec_metric, **cfg.reward.options)
        r = cfg.rollout
        self.sampling = sampling_params(r.temperature, r.top_p, r.top_k, r.max_new_tokens)
        self.eval_sampling = sampling_params(r.eval_temperature, 1.0, 0, r.max_new_tokens)
        self.limits = rollout_limits(r.max_prompt_tokens, r.max_response_tokens, r.max_new_tokens,
                                     r.observation_max_tokens, model_context(self.model.config))
        self.kl = KLSchedule.from_pairs(cfg.algorithm.kl_schedule)
        self.ref_model: Any = None
        given = self.inputs.model is not None and self.kl.needs_reference(0)
        self._initial_state_model = _frozen_copy(self.model) if given else None
        self.total_steps = self._total_steps()
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=o.lr, betas=tuple(o.betas),
                                           weight_decay=o.weight_decay)
        warm = warmup_steps(self.total_steps * cfg.algorithm.mini_batches, o.warmup_ratio)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / (warm + 1)) if warm else 1.0)
        self.sampler = CandidatePool(st.DataSampler(len(self.train_examples), seed=cfg.seed))
        a = cfg.algorithm
        # a track's loss runs only when the estimator produced it (its mask exists)
        weights = (("full", 1.0), (cfg.advantage.schema_track, cfg.advantage.schema_weight))
        self.loss_settings = lp.LossSettings(
            clip_ratio_low=a.clip_ratio_low, clip_ratio_high=a.clip_ratio_high, clip_ratio_c=a.clip_ratio_c,
            loss_agg_mode=a.loss_agg_mode, track_weights=weights, kl_type=a.kl_type,
            entropy_coeff=a.entropy_coeff)
        self.generate = self.inputs.generate or hf_generate(
            self.gen_model, self.tokenizer, self.device, autocast=None, chunk=max(1, cfg.optim.micro_batch_size * 4),
            logprobs=True)  # the generation copy is bf16 itself: no autocast
        if cfg.stage.warm_start.enable:  # fail now, not after the "before" evaluation
            from training.demonstrations import get_script

            get_script(cfg.agent.name)
        quiet_libraries()  # before veRL's first import: its GPU/engine warnings are noise on this engine
        import verl.trainer.ppo.core_algos  # noqa: F401 - import once here (~5 s), not inside step 1

    def _total_steps(self) -> int:
        if self.cfg.trainer.total_steps is not None:
            return self.cfg.trainer.total_steps
        a = self.cfg.algorithm
        per_step = a.batch_size * (a.dynamic_sampling.oversample if a.dynamic_sampling.enable else 1)
        return max(1, math.ceil(len(self.train_examples) / per_step))

    # ------------------------------------------------------------------ generation
    def _timed_generate(self, prompts: list[list[int]], params: Any) -> list[Any]:
        with self.watch.measure("generation"):
            return self.generate(prompts, params)

    def rollout(self, examples: Sequence[Any], group_size: int, agent: Any, sampling: Any,
                progress: bool = False) -> list[Any]:
        """Trajectories for every (example, sample) pair, through the rollout driver."""
        from tools import get_database
        from training.rollout import run_episodes

        requests = [(ex, get_database(ex.db_path), g) for ex in examples for g in range(group_size)]
        return run_episodes(agent, requests, self.tokenizer, self._timed_generate, sampling, self.limits,
                            progress=progress)

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, Any]:
        """Roll out, score, filter, update; returns the step's metrics."""
        cfg, a = self.cfg, self.cfg.algorithm
        self.watch = Stopwatch()
        start = time.perf_counter()
        count = a.batch_size * (a.dynamic_sampling.oversample if a.dynamic_sampling.enable else 1)
        drawn = self.sampler.take(count)
        examples = [self.train_examples[i] for i in drawn]
        with self.watch.measure("rollout"):
            trajectories = self.rollout(examples, a.group_size, self.agent, self.sampling)
        trajectories, too_long = drop_over_long(trajectories)
        by_id = {ex.id: ex for ex in examples}
        with self.watch.measure("rewards"):
            rewards = [self._score(t, by_id[t.example_id]) for t in trajectories]
        buffer = build_buffer(trajectories, rewards, self.cfg, target_questions=a.batch_size)
        self.last_buffer = buffer
        if a.dynamic_sampling.enable:
            back = set(unkept_to_return(buffer, a.dynamic_sampling.return_unkept))
            self.sampler.give_back([i for i in drawn if self.train_examples[i].id in back])
        self._step_examples = examples
        self._write_samples(trajectories, rewards, buffer)  # step: the metrics row's (self.step + 1)
        beta = self.kl.beta(self.step)
        update_metrics = self.update(buffer, beta) if buffer.size else {"update/skipped": 1.0}
        self.step += 1
        metrics = step_metrics(trajectories, rewards, buffer, beta)
        metrics["sampling/prompts_too_long"] = float(too_long)
        metrics.update(update_metrics)
        metrics["lr"] = self.scheduler.get_last_lr()[0]
        times = dict(self.watch.totals)
        times["tools"] = max(0.0, times.get("rollout", 0.0) - times.get("generation", 0.0))
        for key in ("generation", "tools", "rewards", "logprob", "update"):
            metrics[f"time/{key}"] = times.get(key, 0.0)
        metrics["time/step"] = time.perf_counter() - start
        return metrics

    def _write_samples(self, trajectories: Sequence[Any], rewards: Sequence[Any], buffer: StepBuffer) -> None:
        """Append the step's first ``trainer.samples_per_step`` rollouts (whole groups, in
        order) to samples.jsonl with the masks the update used (training/records.py)."""
        from rex import ExecScorer

        from training.records import SampleWriter, result_tables, trajectory_records

        count = self.cfg.trainer.samples_per_step
        if count == 0:
            return
        picked = list(zip(trajectories, rewards))[:count]
        row = {id(t): j for j, t in enumerate(buffer.trajectories)}  # rows of the update
        loss = {i: ({k: v[row[id(t)]] for k, v in buffer.masks.items()},
                    {k: v[row[id(t)]] for k, v in buffer.advantages.items()})
                for i, (t, _) in enumerate(picked) if id(t) in row}
        scorer = ExecScorer()
        examples = {ex.id: ex for ex in self._step_examples}
        tables = {i: result_tables(examples[t.example_id], t.result.final_sql, scorer) for i, (t, _) in enumerate(picked)}
        records, prompts = trajectory_records(
            step=self.step + 1, engine="local", design=self.cfg.agent.name, trajectories=[t for t, _ in picked],
            rewards=[r for _, r in picked], examples=examples, tokenizer=self.tokenizer, loss=loss, tables=tables)
        if self._samples is None:
            self._samples = SampleWriter(self.cfg.run_dir)
        self._samples.write(records, prompts)
        wandb_run = getattr(self.logger, "wandb_run", None)
        if wandb_run is not None:  # the "samples" table the wandb report's sample panel shows
            from training.records import samples_table

            wandb_run.log({"samples": samples_table(records)}, step=self.step + 1)

    def _score(self, trajectory: Any, example: Any) -> Any:
        from tools import get_database

        return self.reward_fn(trajectory, example, get_database(example.db_path))

    # ------------------------------------------------------------------ update
    def update(self, buffer: StepBuffer, beta: float) -> dict[str, float]:
        """One optimizer pass over the buffer (``mini_batches`` optimizer steps).

        With ``algorithm.rollout_correction`` on, the old (fp32 training) log-probs of the
        whole buffer come first, then veRL's IS weights / rejection mask against the
        generating (bf16) model's log-probs; rejected tokens leave every track's mask."""
        self._sync_reference(beta)
        corr = self.cfg.algorithm.rollout_correction
        chunks = _split(list(range(buffer.size)), self.cfg.algorithm.mini_batches)
        correct = corr.enabled and all(t.logprobs is not None for t in buffer.trajectories)
        old = self._old_log_probs(buffer) if len(chunks) > 1 or correct else None
        sums: Counter[str] = Counter()
        is_weights: dict[int, torch.Tensor] | None = None
        if correct and old is not None:
            is_weights, corr_metrics = apply_rollout_correction(buffer, old, corr)
            sums.update(corr_metrics)
            sums = Counter({k: v * len(chunks) for k, v in sums.items()})  # divided by len(chunks) below
        for rows in chunks:
            sums.update(self._optimizer_step(buffer, rows, beta, old, is_weights))
        return {k: v / len(chunks) for k, v in sums.items()}

    def _optimizer_step(self, buffer: StepBuffer, rows: list[int], beta: float,
                        old: dict[int, torch.Tensor] | None,
                        is_weights: dict[int, torch.Tensor] | None = None) -> dict[str, float]:
        """Accumulate gradients over micro-batches, then clip and step once."""
        totals = lp.track_totals(buffer.mask_tensors(rows))
        losses: Counter[str] = Counter()  # per-micro losses are already globally normalised: sum them
        weighted: Counter[str] = Counter()  # token-weighted averages (clip fraction, entropy)
        n_full = totals.tokens.get("full", 0.0) or 1.0
        self.optimizer.zero_grad(set_to_none=True)
        for micro in _micro_batches(rows, buffer, self.cfg.optim.micro_batch_size):
            batch = buffer.policy_batch(micro, self.tokenizer.pad_token_id)
            ref = self._ref_log_probs(batch) if beta > 0 else None
            with self.watch.measure("update"):
                logp, entropy = lp.response_log_probs(
                    self.model, batch, self.device, self.autocast, with_entropy=True,
                    entropy_grad=self.loss_settings.entropy_coeff > 0)  # [micro, resp_len] x2
                old_lp = (torch.stack([_pad_to(old[i], logp.shape[1]) for i in micro]).to(logp.device)
                          if old else logp.detach())  # [micro, resp_len]
                isw = (torch.stack([_pad_to(is_weights[i], logp.shape[1]) for i in micro])
                       if is_weights else None)  # [micro, resp_len]
                loss, m = lp.grpo_loss(logp, old_lp, batch.masks, batch.advantages, totals,
                                       self.loss_settings, beta=beta, ref_log_probs=ref, entropy=entropy,
                                       rollout_is_weights=isw)
                loss.backward()
            full = batch.masks["full"].to(logp.device)  # [micro, resp_len]
            share = float(full.sum()) / n_full
            if batch.rollout_log_probs is not None and share > 0:
                for key, value in mismatch_metrics(old_lp, batch.rollout_log_probs, full).items():
                    weighted[key] += value * share
            losses.update({k: v for k, v in m.items() if k.startswith("pg_loss/") or k == "kl"})
            weighted["policy/clip_frac"] += m.get("clip_frac/full", 0.0) * share
            weighted["policy/ppo_kl"] += m.get("ppo_kl/full", 0.0) * share
            if entropy is not None:
                weighted["policy/entropy"] += float((entropy.detach() * full).sum()) / n_full
        with self.watch.measure("update"):
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.grad_clip)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self._sync_generation_copy()
        return {**losses, **weighted, "policy/grad_norm": float(norm)}

    def _old_log_probs(self, buffer: StepBuffer) -> dict[int, torch.Tensor]:
        """Log-probs of the rollout policy, before any optimizer step of this buffer."""
        out: dict[int, torch.Tensor] = {}
        with self.watch.measure("logprob"), torch.no_grad():
            for micro in _micro_batches(list(range(buffer.size)), buffer, self.cfg.optim.micro_batch_size):
                batch = buffer.policy_batch(micro, self.tokenizer.pad_token_id)
                logp, _ = lp.response_log_probs(self.model, batch, self.device, self.autocast)
                for j, i in enumerate(micro):
                    out[i] = logp[j].cpu()
        return out

    def _ref_log_probs(self, batch: lp.PolicyBatch) -> torch.Tensor:
        with self.watch.measure("logprob"), torch.no_grad():
            logp, _ = lp.response_log_probs(self.ref_model, batch, self.device, self.autocast)
        return logp

    def _sync_reference(self, beta: float) -> None:
        """Load the frozen initial policy while beta > 0 now or later; free it after."""
        needed = self.kl.needs_reference(self.step)
        if needed and self.ref_model is None:
            self.ref_model = self._initial_policy()
        elif not needed and self.ref_model is not None:
            self.ref_model = None
            self.say(f"[kl] beta is 0 from step {self.step} on: reference model released")

    def _initial_policy(self) -> Any:
        import copy

        if self.inputs.model is not None:
            ref = copy.deepcopy(self._initial_state_model)
        else:
            from training.model import load_model

            ref = load_model(self._reference_path(), self.device, say=self.say).model
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref

    def _reference_path(self) -> str | None:
        """The KL reference: the warm-started weights when this run made them, else the
        weights the run started from."""
        from training.engines.local_warm_start import DONE, warm_start_dir

        warm = warm_start_dir(self.cfg.run_dir)
        if self.cfg.stage.warm_start.enable and (warm / DONE).exists():
            return str(warm)
        return self.cfg.stage.init_from or self.cfg.model.path

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, tag: str) -> dict[str, Any]:
        """Greedy EX of the current policy on the fixed held-out subset."""
        from training.engines.local_eval import execution_accuracy
        from training.records import write_heldout

        if not self.eval_examples:
            return {}
        start = time.perf_counter()
        self.say(f"[eval {tag}] greedy rollouts on {len(self.eval_examples)} held-out questions")
        trajectories = self.rollout(self.eval_examples, 1, self.eval_agent, self.eval_sampling,
                                    progress="console" in self.cfg.logger)
        result = execution_accuracy(self.eval_examples, trajectories)
        scores = write_heldout(self.cfg.run_dir, tag, self.eval_examples, trajectories)  # per question
        result.update({k: v for k, v in scores.items() if k != "ex"})  # EX per difficulty, official EX, REX, QATCH
        result["duration_s"] = time.perf_counter() - start
        self.say(f"[eval {tag}] EX {pct(result['ex'])} on {result['n']} held-out questions "
                 f"({pct(result['executable'], 0)} executable, {result['duration_s']:.0f}s)")
        return result

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        meta = st.CheckpointMeta(step=self.step, sampler=self.sampler.state_dict(), wandb_id=self.wandb_id,
                                 model_source=self.model_source)
        return st.save_checkpoint(self.cfg.run_dir, meta, self.model, self.optimizer, self.scheduler,
                                  keep=self.cfg.trainer.keep_checkpoints, save_weights=self.cfg.trainer.save_weights,
                                  tokenizer=self.tokenizer)

    def restore(self) -> bool:
        """Continue from the latest checkpoint; False when there is none."""
        path = st.latest_checkpoint(self.cfg.run_dir)
        if path is None:
            return False
        meta = st.load_checkpoint(path, self.model, self.optimizer, self.scheduler)
        self._sync_generation_copy()
        self.step, self.wandb_id = meta.step, meta.wandb_id
        self.sampler.load_state_dict(meta.sampler)
        self.say(f"[resume] continuing from {path} (step {self.step})")
        return True

    def _prepare_run_dir(self) -> dict[str, Any] | None:
        """Clear, resume or refuse an existing run directory; a finished run resumed
        returns its summary (and nothing is changed)."""
        import shutil

        from training.engines.local_warm_start import warm_start_dir

        cfg = self.cfg
        existing = st.latest_checkpoint(cfg.run_dir)
        if cfg.fresh:
            st.clear_checkpoints(cfg.run_dir)
            for name in ("metrics.jsonl", "samples.jsonl", "prompts.jsonl", "summary.json"):
                (Path(cfg.run_dir) / name).unlink(missing_ok=True)
            shutil.rmtree(Path(cfg.run_dir) / FINAL_DIR, ignore_errors=True)
            shutil.rmtree(warm_start_dir(cfg.run_dir), ignore_errors=True)
        elif cfg.resume:
            finished = self._finished_summary()
            if finished is not None:
                return finished
            if not self.restore():
                self.say(f"[resume] no checkpoint in {cfg.run_dir}; starting from step 0")
            elif self.step < self.total_steps:
                _relabel_records(Path(cfg.run_dir) / METRICS, "eval_after", "eval_val", before_step=self.total_steps)
        elif existing is not None:
            raise ConfigError(
                f"{cfg.run_dir} already holds checkpoint {existing.name}; pass resume=true to continue it, "
                "fresh=true to start over, or run_dir=<another directory>")
        return None

    def _finished_summary(self) -> dict[str, Any] | None:
        """The summary of a run that already finished ``total_steps`` (or more), else None."""
        import json

        path = st.latest_checkpoint(self.cfg.run_dir)
        summary_path = Path(self.cfg.run_dir) / SUMMARY
        if path is None or not summary_path.is_file():
            return None
        summary = json.loads(summary_path.read_text())
        step = st.read_meta(path).step
        if summary.get("steps") != step or step < self.total_steps:
            return None
        self.say(f"[resume] {self.cfg.run_dir} is finished ({step} steps; trainer.total_steps={self.total_steps}): "
                 "nothing to do, nothing changed. Pass a larger trainer.total_steps to continue it, or "
                 "fresh=true to start over.")
        return summary

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, Any]:
        """Before-EX, steps with periodic checkpoints and validation, after-EX, summary."""
        from training.logging_utils import RunLogger

        from training.records import write_config_record

        cfg = self.cfg
        finished = self._prepare_run_dir()
        if finished is not None:
            return finished
        Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
        (Path(cfg.run_dir) / CONFIG).write_text(describe(cfg))  # the configuration that runs
        write_config_record(cfg.run_dir, self.step, to_yaml_tree(cfg))
        self.logger = RunLogger(cfg.run_dir, cfg.logger, self.total_steps, project=cfg.trainer.project,
                                run_name=f"{cfg.recipe_name}-{Path(cfg.run_dir).name}", config=to_yaml_tree(cfg),
                                wandb_id=self.wandb_id, start_step=self.step, say=self.say)
        self.wandb_id = self.logger.wandb_id
        before = self._eval_once("before") if cfg.trainer.eval_before_after and self.step == 0 else {}
        warm = self._warm_start() if cfg.stage.warm_start.enable and self.step == 0 else {}
        self.logger.start_progress()
        try:
            while self.step < self.total_steps:
                metrics = self.train_step()
                self.logger.log(self.step, metrics)
                if self.step % cfg.trainer.save_every == 0 or self.step == self.total_steps:
                    with self.watch.measure("checkpoint"):
                        self.save()
                if cfg.trainer.val_every and self.step % cfg.trainer.val_every == 0 and self.step < self.total_steps:
                    self._eval_logged("val")
            after = self._eval_once("after") if cfg.trainer.eval_before_after else {}
            final_dir = self._save_final()
        finally:
            self.logger.close()
        return self._summary(before, after, final_dir, warm)

    def _warm_start(self) -> dict[str, Any]:
        """SFT on demonstrations before GRPO (see training/engines/local_warm_start.py)."""
        from training.engines.local_warm_start import run_warm_start

        result = run_warm_start(self)
        self._sync_generation_copy()
        if self._initial_state_model is not None:  # a given model's KL reference: the warm-started one
            self._initial_state_model = _frozen_copy(self.model)
        if not (self.cfg.resume and self._recorded("warm_start", 0)):
            self.logger.log(0, result, kind="warm_start")
        if self.cfg.stage.warm_start.eval_after and self.cfg.trainer.eval_before_after:
            result["ex"] = self._eval_once("warm_start").get("ex")
        return result

    def _eval_logged(self, tag: str) -> dict[str, Any]:
        result = self.evaluate(tag)
        if result:
            self.logger.log(self.step, {k: v for k, v in result.items() if not isinstance(v, dict)}, kind=f"eval_{tag}")
        return result

    def _eval_once(self, tag: str) -> dict[str, Any]:
        """Evaluate and log, unless a resumed run already recorded this evaluation at this
        step (killed after it): then that record is the result, and no duplicate is written."""
        if self.cfg.resume:
            found = self._recorded(f"eval_{tag}", self.step)
            if found:
                return found
        return self._eval_logged(tag)

    def _recorded(self, kind: str, step: int) -> dict[str, Any]:
        """The last ``kind`` record of ``metrics.jsonl`` at ``step`` ({} when none)."""
        found = [r for r in read_records(Path(self.cfg.run_dir) / METRICS) if r.get("kind") == kind]
        found = [r for r in found if r.get("step") == step]
        return found[-1] if found else {}

    def _save_final(self) -> Path:
        """A plain HF model directory (model + tokenizer) that eval.run and model.path load:
        hard links to the last checkpoint's files when it holds these weights (no second
        copy on disk), else written out."""
        final = Path(self.cfg.run_dir) / FINAL_DIR
        last = st.latest_checkpoint(self.cfg.run_dir)
        if last is not None and st.read_meta(last).step == self.step and st.has_weights(last):
            st.link_model_dir(last, final)
            return final
        import shutil

        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(tmp)
        self.tokenizer.save_pretrained(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return final

    def _summary(self, before: dict[str, Any], after: dict[str, Any], final_dir: Path,
                 warm: dict[str, Any]) -> dict[str, Any]:
        """summary.json and the closing lines; evaluations of earlier processes of a resumed
        run are read back from metrics.jsonl (so a resumed run keeps its EX before)."""
        import json

        run_dir = Path(self.cfg.run_dir)
        records = read_records(run_dir / METRICS)
        before = before or _last(records, "eval_before")
        if not warm and _last(records, "warm_start"):
            warm = {k: v for k, v in _last(records, "warm_start").items() if k not in ("step", "kind", "wall_time")}
            warm["ex"] = _last(records, "eval_warm_start").get("ex")
        summary = {
            "recipe": self.cfg.recipe_name, "steps": self.step, "run_dir": str(run_dir),
            "final_model": str(final_dir), "metrics": str(run_dir / METRICS),
            "checkpoint": str(st.latest_checkpoint(run_dir)), "wandb_dir": self.logger.wandb_dir,
            "ex_before": before.get("ex"), "ex_warm_start": warm.get("ex"), "ex_after": after.get("ex"),
            "eval_questions": before.get("n", after.get("n")), "warm_start": warm or None,
            "sweep": self.cfg.sweep, "ablation": dict(self.cfg.ablation),
        }
        (run_dir / SUMMARY).write_text(json.dumps(summary, indent=2))
        total, parts = st.disk_usage(run_dir)
        summary["disk_bytes"] = total
        (run_dir / SUMMARY).write_text(json.dumps(summary, indent=2))
        self.say(summary_text(summary, parts))
        return summary


def summary_text(summary: dict[str, Any], parts: dict[str, int]) -> str:
    """The closing lines of a run: EX (percent), where everything is, and the disk it takes."""
    delta = ""
    if summary["ex_before"] is not None and summary["ex_after"] is not None:
        middle = f" -> after warm start {pct(summary['ex_warm_start'])}" if summary["ex_warm_start"] is not None else ""
        delta = (f"EX before {pct(summary['ex_before'])}{middle} -> after {pct(summary['ex_after'])} on "
                 f"{summary['eval_questions']} held-out questions (greedy)")
    run_dir = summary["run_dir"]
    shares = ", ".join(f"{name} {st.human_size(size)}" for name, size in sorted(parts.items(), key=lambda kv: -kv[1])
                       if size >= 1 << 20)
    weights = Path(summary["final_model"]) / "model.safetensors"
    if weights.is_file() and weights.stat().st_nlink > 1:
        shares += "; final/ shares the last checkpoint's weights"
    return (f"[summary] {summary['recipe']}: {summary['steps']} steps. {delta}\n"
            f"    checkpoint {summary['checkpoint']}\n    final model {summary['final_model']}\n"
            f"    metrics {summary['metrics']}\n    wandb {summary['wandb_dir']}\n"
            f"    run directory {run_dir}: {st.human_size(summary['disk_bytes'])} on disk"
            + (f" ({shares})" if shares else ""))


# ----------------------------------------------------------------------------- helpers

def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` ([] when absent; a line cut by a kill is skipped)."""
    import json

    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _last(records: Sequence[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [r for r in records if r.get("kind") == kind]
    return found[-1] if found else {}


def _relabel_records(path: Path, kind: str, new_kind: str, before_step: int) -> None:
    """Rename ``kind`` records before ``before_step`` (a finished run continued with more
    steps: its old final evaluation is now a validation record), atomically."""
    import json
    import os

    records = read_records(path)
    if not any(r.get("kind") == kind and r.get("step", 0) < before_step for r in records):
        return
    for r in records:
        if r.get("kind") == kind and r.get("step", 0) < before_step:
            r["kind"] = new_kind
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, path)


def step_metrics(trajectories: Sequence[Any], rewards: Sequence[Any], buffer: StepBuffer, beta: float) -> dict[str, Any]:
    """Reward and every component, EX, lengths, turns, tool calls, format failures."""
    from training.engines.local_eval import rollout_metrics

    metrics = rollout_metrics(trajectories, rewards)
    metrics["kl/beta"] = beta
    metrics["sampling/fill_rate"] = buffer.fill_rate
    metrics["sampling/groups_kept"] = buffer.groups_kept
    metrics["sampling/zero_variance_groups"] = buffer.zero_variance_groups
    metrics["sampling/trajectories_updated"] = buffer.size
    metrics.update(buffer.flags)
    return metrics


def drop_over_long(trajectories: Sequence[Any]) -> tuple[list[Any], int]:
    """Trajectories whose prompt exceeded ``rollout.max_prompt_tokens`` (flag
    ``prompt_too_long``, no tokens generated) leave their group - dropped, never truncated,
    as on the verl engine; returns the rest and how many questions were dropped."""
    kept = [t for t in trajectories if "prompt_too_long" not in t.result.flags]
    dropped = {t.example_id for t in trajectories} - {t.example_id for t in kept}
    return kept, len(dropped)


def mismatch_metrics(train_lp: torch.Tensor, rollout_lp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Rollout/training mismatch on ``mask``'s tokens (all [rows, resp_len]): veRL's
    ``compute_offpolicy_metrics`` (kl = mean(rollout - training log-prob), k3_kl, the two
    perplexities), prefixed ``rollout_corr/`` as veRL logs them. 0 when generation and
    training share weights and precision."""
    from verl.trainer.ppo.rollout_corr_helper import compute_offpolicy_metrics

    mask = mask.to(train_lp.device)
    if float(mask.sum()) == 0:
        return {}
    out = compute_offpolicy_metrics(old_log_prob=train_lp.detach(), rollout_log_prob=rollout_lp.to(train_lp.device),
                                     response_mask=mask)
    return {f"rollout_corr/{k}": float(v) for k, v in out.items()}


def apply_rollout_correction(buffer: StepBuffer, old: dict[int, torch.Tensor],
                             corr: Any) -> tuple[dict[int, torch.Tensor] | None, dict[str, float]]:
    """veRL's IS weights and rejection mask for the whole buffer, from the training model's
    log-probs ``old`` and the generating model's (``trajectory.logprobs``).

    The rejection mask is applied to every track's mask in the buffer (so the loss
    normalisers count only accepted tokens, as veRL's modified ``response_mask`` does);
    returns per-row IS weights (None when IS is off) and veRL's ``rollout_corr/*`` metrics.
    """
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    rows = list(range(buffer.size))
    mask = buffer.mask_tensors(rows)["full"]  # [n, W]
    if float(mask.sum()) == 0:
        return None, {}
    width = mask.shape[1]
    old_t = torch.stack([_pad_to(old[i], width) for i in rows])  # [n, W]
    roll_t = torch.stack([_pad_to(torch.tensor(buffer.trajectories[i].logprobs, dtype=torch.float32), width)
                          for i in rows])  # [n, W]
    weights, kept, metrics = compute_rollout_correction_and_rejection_mask(
        old_t, roll_t, mask, rollout_is=corr.rollout_is, rollout_is_threshold=corr.rollout_is_threshold,
        rollout_is_batch_normalize=corr.rollout_is_batch_normalize, rollout_rs=corr.rollout_rs,
        rollout_rs_threshold=corr.rollout_rs_threshold)
    kept = kept.float()  # [n, W]
    for track, per_row in buffer.masks.items():
        for i in rows:
            n = len(per_row[i])
            per_row[i] = [a * b for a, b in zip(per_row[i], kept[i, :n].tolist())]
    metrics["rollout_corr/rejected_tokens"] = float((mask - kept * mask).sum())
    if weights is None:
        return None, metrics
    w = weights.batch["rollout_is_weights"]  # [n, W]
    return {i: w[i, : len(buffer.trajectories[i].response_ids)].clone() for i in rows}, metrics


def _split(rows: list[int], parts: int) -> list[list[int]]:
    parts = max(1, min(parts, len(rows)))
    size = math.ceil(len(rows) / parts)
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def _micro_batches(rows: list[int], buffer: StepBuffer, size: int) -> list[list[int]]:
    """Rows grouped by total length (less padding), ``size`` per micro-batch."""
    ordered = sorted(rows, key=buffer.length)
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def _pad_to(t: torch.Tensor, width: int) -> torch.Tensor:
    if t.shape[0] >= width:
        return t[:width]
    return torch.cat([t, t.new_zeros(width - t.shape[0])])


def _frozen_copy(model: Any) -> Any:
    import copy

    return copy.deepcopy(model).eval()
