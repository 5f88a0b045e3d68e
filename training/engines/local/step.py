"""One step of the local engine: draw B questions (B*K with dynamic sampling), roll out G
episodes each through the rollout driver with batched ``generate``, score them, drop
zero-variance groups (dynamic sampling), turn rewards into per-track advantages
(buffer.py), then one optimizer pass over the buffer (update.py), the KL
reference loaded while beta > 0. The step's first rollouts go to samples.jsonl with the
masks the update used.

``TrainStep`` is one part of ``training.engines.local.trainer.LocalTrainer``, which builds every
attribute declared on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from training.algorithm.kl import KLSchedule
from training.config import TrainConfig
from training.engines.local.buffer import CandidatePool, StepBuffer, build_buffer, unkept_to_return
from training.engines.local.policy_models import PolicyModels
from training.engines.local.update import Stopwatch, Updater
from training.rollout import GenerateWrapper


class TimedGenerate(GenerateWrapper):
    """The engine's generate, its seconds counted as the step's ``generation`` phase."""

    def __init__(self, inner: Any, watch: Stopwatch) -> None:
        super().__init__(inner)
        self.watch = watch

    def __call__(self, prompts: list[list[int]], params: Any) -> list[Any]:
        with self.watch.measure("generation"):
            return self.inner(prompts, params)


class TrainStep:
    """The step part of ``LocalTrainer``: rollouts, rewards, the buffer and the update."""

    # built by LocalTrainer.__post_init__ (training/engines/local/trainer.py)
    cfg: TrainConfig
    models: PolicyModels
    updater: Updater
    watch: Stopwatch
    kl: KLSchedule
    sampler: CandidatePool
    train_examples: list[Any]
    agent: Any
    sampling: Any
    limits: Any
    reward_fn: Any
    generate: Callable[..., Any]
    step: int
    logger: Any
    _samples: Any
    tokenizer: Any
    scheduler: Any
    _say: Callable[[str], None]

    # ------------------------------------------------------------------ generation

    def rollout(
        self, examples: Sequence[Any], group_size: int, agent: Any, sampling: Any, progress: bool = False
    ) -> list[Any]:
        """Trajectories for every (example, sample) pair, through the rollout driver."""
        from tools import get_database
        from training.rollout import run_episodes

        requests = [(ex, get_database(ex.db_path), g) for ex in examples for g in range(group_size)]
        with self.updater.moments_set_aside():  # a no-op inside train_step's; an evaluation's own
            return run_episodes(
                agent,
                requests,
                self.tokenizer,
                TimedGenerate(self.generate, self.watch),
                sampling,
                self.limits,
                progress=progress,
            )

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, Any]:
        """Roll out, score, filter, update; returns the step's metrics. AdamW's moments wait on
        disk meanwhile, back only for the optimizer steps (``optim.spill_state``)."""
        with self.updater.moments_set_aside():
            return self._train_step()

    def _train_step(self) -> dict[str, Any]:
        a = self.cfg.algorithm
        self.watch.reset()
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
        order) to samples.jsonl with the masks the update used (training/runs/samples.py)."""
        from rex import ExecScorer
        from training.runs.samples import SampleWriter, result_tables, trajectory_records

        count = self.cfg.trainer.samples_per_step
        if count == 0:
            return
        picked = list(zip(trajectories, rewards, strict=True))[:count]
        row = {id(t): j for j, t in enumerate(buffer.trajectories)}  # rows of the update
        loss = {
            i: (
                {k: v[row[id(t)]] for k, v in buffer.masks.items()},
                {k: v[row[id(t)]] for k, v in buffer.advantages.items()},
            )
            for i, (t, _) in enumerate(picked)
            if id(t) in row
        }
        scorer = ExecScorer()
        examples = {ex.id: ex for ex in self._step_examples}
        tables = {
            i: result_tables(examples[t.example_id], t.result.final_sql, scorer) for i, (t, _) in enumerate(picked)
        }
        records, prompts = trajectory_records(
            step=self.step + 1,
            engine="local",
            design=self.cfg.agent.name,
            trajectories=[t for t, _ in picked],
            rewards=[r for _, r in picked],
            examples=examples,
            tokenizer=self.tokenizer,
            loss=loss,
            tables=tables,
        )
        if self._samples is None:
            self._samples = SampleWriter(self.cfg.run_dir)
        self._samples.write(records, prompts)
        wandb_run = getattr(self.logger, "wandb_run", None)
        if wandb_run is not None:  # the "samples" table the wandb report's sample panel shows
            from training.runs.samples import samples_table

            wandb_run.log({"samples": samples_table(records)}, step=self.step + 1)

    def _score(self, trajectory: Any, example: Any) -> Any:
        from tools import get_database

        return self.reward_fn(trajectory, example, get_database(example.db_path))

    # ------------------------------------------------------------------ update
    def update(self, buffer: StepBuffer, beta: float) -> dict[str, float]:
        """One optimizer pass over the buffer (``Updater.update``), with the KL reference
        loaded while beta > 0 now or later."""
        self.models.keep_reference(self.kl.needs_reference(self.step), self._reference_path(), self._say, self.step)
        return self.updater.update(buffer, beta)

    def _reference_path(self) -> str | None:
        """The KL reference: the warm-started weights when this run made them, else the
        weights the run started from."""
        from training.engines.local.warm_start import DONE, warm_start_dir

        warm = warm_start_dir(self.cfg.run_dir)
        if self.cfg.stage.warm_start.enable and (warm / DONE).exists():
            return str(warm)
        return self.cfg.stage.init_from or self.cfg.model.path


# ----------------------------------------------------------------------------- helpers


def step_metrics(
    trajectories: Sequence[Any], rewards: Sequence[Any], buffer: StepBuffer, beta: float
) -> dict[str, Any]:
    """Reward and every component, EX, lengths, turns, tool calls, format failures."""
    from training.engines.local.heldout import rollout_metrics

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
