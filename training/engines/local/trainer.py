"""The ``local`` engine: one process, CPU or one GPU, a HF transformers policy.

A step: draw B questions (B*K with dynamic sampling), roll G episodes each through the
rollout driver with batched ``generate``, score them, drop zero-variance groups (dynamic
sampling), turn rewards into per-track advantages, then one optimizer pass over the
buffer (``algorithm.mini_batches`` optimizer steps, gradient accumulation over
micro-batches). Old log-probs come from a forward pass (with one mini-batch the policy
has not moved since the rollout, so they are the detached log-probs of the update's own
forward pass); reference log-probs only while beta > 0. Checkpoints every N steps;
``resume=true`` continues exactly. SIGTERM or SIGUSR1 stops the run after the step in
progress, with a checkpoint and exit status 75 (training/runs/preemption.py).

With ``stage.warm_start.enable`` (on in the CPU laptop profile) the run first fine-tunes
on demonstrations of the design's protocol (warm_start.py), then runs GRPO from
there; the summary reports greedy EX before, after the warm start and after RL.

The pieces, beside this module: the model bundle (policy_models.py: policy, bf16 generation
copy, reference), the updater (update.py and loss.py: AdamW, log-prob passes, loss), one
step (step.py, buffer.py), checkpoints and resume (checkpoints.py, state.py), the run
directory (run_files.py, with the start policy of ``training.runs.resume_policy``); this
module builds them and is the loop that drives them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.units import pct
from tools.errors import ConfigError
from training.algorithm.kl import KLSchedule
from training.config import TrainConfig, to_yaml_tree
from training.engines.local import loss as lp
from training.engines.local import run_files as rd
from training.engines.local import state as st
from training.engines.local.buffer import CandidatePool
from training.engines.local.checkpoints import Checkpoints
from training.engines.local.policy_models import PolicyModels
from training.engines.local.step import TrainStep
from training.engines.local.update import Stopwatch, Updater
from training.runs.preemption import Preempted, StopSignals, stopped_message

Say = Callable[[str], None]


def describe(cfg: TrainConfig) -> str:
    """The effective configuration the local engine runs, as YAML."""
    from omegaconf import OmegaConf

    header = f"# effective configuration: engine=local device={cfg.engine.device}\n"
    return header + OmegaConf.to_yaml(OmegaConf.create(to_yaml_tree(cfg)))


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run ``cfg`` to completion and return the summary (also written to summary.json)."""
    if cfg.trainer.mode != "sync":
        raise ConfigError(
            f"trainer.mode={cfg.trainer.mode}: the local engine trains synchronously; the async modes are veRL's "
            "(engine=verl), or set trainer.mode=sync"
        )
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


# ----------------------------------------------------------------------------- trainer


@dataclass
class TrainerInputs:
    """What a trainer can be given instead of loading it (tests, benchmarks)."""

    model: Any = None
    tokenizer: Any = None
    model_source: str = ""
    train_examples: Sequence[Any] | None = None
    eval_examples: Sequence[Any] | None = None
    supervised_examples: Sequence[Any] | None = None  # the SFT stages' questions (else supervised.data's)
    generate: Callable[..., Any] | None = None  # a GenerateFn replacing the model's generate


@dataclass
class LocalTrainer(TrainStep, Checkpoints):
    """One run: the model bundle (``models``), the updater, the data, agents, reward and
    loggers, and the loop that drives them (one step: ``TrainStep``; checkpoints and
    resume: ``Checkpoints``)."""

    cfg: TrainConfig
    inputs: TrainerInputs = field(default_factory=TrainerInputs)
    say: Say = print

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.device = cfg.engine.device if cfg.engine.device != "auto" else "cpu"
        st.seed_everything(cfg.seed)
        self.kl = KLSchedule.from_pairs(cfg.algorithm.kl_schedule)
        given = self.inputs
        self.models = PolicyModels.load(
            cfg.model,
            self.device,
            cfg.stage.init_from or cfg.model.path,
            given.model,
            given.tokenizer,
            given.model_source,
            keep_initial=self.kl.needs_reference(0),
            say=self._say,
        )
        self._load_data()
        self._build_components()
        self.step = 0
        self.wandb_id: str | None = None
        self.logger: Any = None
        self._samples: Any = None  # training.runs.samples.SampleWriter, made at the first step

    def _say(self, text: str) -> None:
        self.say(text)  # read at call time: callers may replace ``say`` after construction

    # the bundle's and the updater's parts, by the names scripts and tests use
    model = property(lambda self: self.models.model)
    gen_model = property(lambda self: self.models.gen_model)
    tokenizer = property(lambda self: self.models.tokenizer)
    autocast = property(lambda self: self.models.autocast)
    model_source = property(lambda self: self.models.source)
    optimizer = property(lambda self: self.updater.optimizer)
    scheduler = property(lambda self: self.updater.scheduler)
    loss_settings = property(lambda self: self.updater.loss_settings)

    def _sync_generation_copy(self) -> None:
        self.models.sync_generation_copy()

    # ------------------------------------------------------------------ setup
    def _load_data(self) -> None:
        from eval.data import load_examples, load_from_config

        d = self.cfg.data
        if self.inputs.train_examples is not None:
            self.train_examples = list(self.inputs.train_examples)
        else:  # the split, narrowed by data.train_ids (the RL filter's questions) when set
            self.train_examples = load_from_config(d, "train")
        if self.inputs.eval_examples is not None:
            self.eval_examples = list(self.inputs.eval_examples)
        else:
            self.eval_examples = load_examples(
                kind=d.kind,
                root=d.root,
                split=d.eval_split,
                drop_failing_gold=d.drop_failing_gold,
                limit=None,
                dsn=getattr(d, "dsn", None),
            )
        from training.rollout.setup import fixed_subset

        self.eval_examples = fixed_subset(self.eval_examples, d.eval_limit, self.cfg.seed)
        if not self.train_examples:
            raise ConfigError(f"data split {d.split!r} of {d.kind!r} has no examples; check data.root / data.limit")
        self.say(
            f"[data] {len(self.train_examples)} training examples ({d.kind}/{d.split}), "
            f"{len(self.eval_examples)} held-out ({d.kind}/{d.eval_split})"
        )
        if self.cfg.reward.exec_metric == "test_suite":  # chosen for the training questions, before step 1
            from rex.test_suite import ensure_suites

            # with the held-out ones too when they are scored on the suite: one suite per database for both
            held_out = self.eval_examples if self.cfg.trainer.eval_test_suite else []
            built, cached = ensure_suites((ex.db_path, ex.gold_sql) for ex in [*self.train_examples, *held_out])
            self.say(f"[data] test suites for reward.exec_metric=test_suite: {built} built, {cached} cached")

    def _build_components(self) -> None:
        from agents import make_agent, runtime_options
        from training.algorithm.rewards import get_reward
        from training.generation.hf import hf_generate
        from training.rollout.setup import model_context, rollout_limits, sampling_params

        cfg = self.cfg
        name, pool = cfg.agent.name, lambda: self.train_examples
        self.agent = make_agent(name, **runtime_options(name, cfg.agent.options, few_shot_pool=pool))
        self.eval_agent = make_agent(
            name, **runtime_options(name, cfg.agent.options, inference=True, few_shot_pool=pool)
        )
        self.reward_fn = get_reward(cfg.reward.name, exec_metric=cfg.reward.exec_metric, **cfg.reward.options)
        r = cfg.rollout
        self.sampling = sampling_params(r.temperature, r.top_p, r.top_k, r.max_new_tokens)
        self.eval_sampling = sampling_params(r.eval_temperature, 1.0, 0, r.max_new_tokens)
        self.limits = rollout_limits(
            r.max_prompt_tokens,
            r.max_response_tokens,
            r.max_new_tokens,
            r.observation_max_tokens,
            model_context(self.model.config),
        )
        self.total_steps = self._total_steps()
        a = cfg.algorithm
        # a track's loss runs only when the estimator produced it (its mask exists)
        weights = (("full", 1.0), (cfg.advantage.schema_track, cfg.advantage.schema_weight))
        loss = lp.LossSettings(
            clip_ratio_low=a.clip_ratio_low,
            clip_ratio_high=a.clip_ratio_high,
            clip_ratio_c=a.clip_ratio_c,
            loss_agg_mode=a.loss_agg_mode,
            track_weights=weights,
            kl_type=a.kl_type,
            entropy_coeff=a.entropy_coeff,
        )
        self.watch = Stopwatch()
        self.updater = Updater(self.models, cfg.optim, a, loss, self.total_steps, self.watch, spill_dir=cfg.run_dir)
        self.sampler = CandidatePool(st.DataSampler(len(self.train_examples), seed=cfg.seed))
        self.generate = self.inputs.generate or hf_generate(
            self.gen_model,
            self.tokenizer,
            self.device,
            autocast=None,
            chunk=generation_rows(cfg),
            logprobs=True,
            prefix_reuse=cfg.model.prefix_reuse,
        )  # the generation copy is bf16 itself: no autocast
        if cfg.stage.warm_start.enable:  # fail now, not after the "before" evaluation
            from training.supervised.demonstrations import get_script

            get_script(cfg.agent.name)
        quiet_libraries()  # before veRL's first import: its GPU/engine warnings are noise on this engine
        import verl.trainer.ppo.core_algos  # noqa: F401 - import once here (~5 s), not inside step 1

    def _total_steps(self) -> int:
        if self.cfg.trainer.total_steps is not None:
            return self.cfg.trainer.total_steps
        a = self.cfg.algorithm
        per_step = a.batch_size * (a.dynamic_sampling.oversample if a.dynamic_sampling.enable else 1)
        return max(1, math.ceil(len(self.train_examples) / per_step))

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, tag: str) -> dict[str, Any]:
        """Greedy EX of the current policy on the fixed held-out subset."""
        from agents.designs import linked_schema_reader
        from training.engines.local.heldout import execution_accuracy
        from training.runs.samples import write_heldout

        if not self.eval_examples:
            return {}
        start = time.perf_counter()
        self.say(f"[eval {tag}] greedy rollouts on {len(self.eval_examples)} held-out questions")
        trajectories = self.rollout(
            self.eval_examples, 1, self.eval_agent, self.eval_sampling, progress="console" in self.cfg.logger
        )
        result = execution_accuracy(self.eval_examples, trajectories)
        linking = linked_schema_reader(self.cfg.agent.name)  # the design's hook: linking figures per question
        suite = self.cfg.trainer.eval_test_suite
        if suite:
            self._prepare_eval_suites()
        scores = write_heldout(self.cfg.run_dir, tag, self.eval_examples, trajectories, linking, suite)  # per question
        result.update({k: v for k, v in scores.items() if k != "ex"})  # EX per difficulty, official EX, REX, QATCH
        result["duration_s"] = time.perf_counter() - start
        on_suite = f", {pct(result['ex_test_suite'])} on the test suite" if "ex_test_suite" in result else ""
        self.say(
            f"[eval {tag}] EX {pct(result['ex'])}{on_suite} on {result['n']} held-out questions "
            f"({pct(result['executable'], 0)} executable, {result['duration_s']:.0f}s)"
        )
        return result

    def _prepare_eval_suites(self) -> None:
        """The test suites of the held-out databases, chosen for their held-out gold queries;
        built once (cached across runs), before the first held-out score needs them."""
        if getattr(self, "_eval_suites_ready", False):
            return
        from rex.test_suite.suites import ensure_suites, on_sqlite

        # SQLite-only: held-out questions on another dialect get no ex_test_suite (eval.scoring)
        on_suite = [ex for ex in self.eval_examples if on_sqlite(ex.db_path)]
        built, cached = ensure_suites((ex.db_path, ex.gold_sql) for ex in on_suite)
        self.say(f"[eval] test suites of the held-out databases: {built} built, {cached} cached (ex_test_suite)")
        self._eval_suites_ready = True

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, Any]:
        """Before-EX, steps with periodic checkpoints and validation, after-EX, summary."""
        from training.runs.logger import RunLogger
        from training.runs.samples import write_config_record

        cfg = self.cfg
        finished = self._prepare_run_dir()
        if finished is not None:
            return finished
        Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
        (Path(cfg.run_dir) / rd.CONFIG).write_text(describe(cfg))  # the configuration that runs
        write_config_record(cfg.run_dir, self.step, to_yaml_tree(cfg))
        self.logger = RunLogger(
            cfg.run_dir,
            cfg.logger,
            self.total_steps,
            project=cfg.trainer.project,
            run_name=f"{cfg.recipe_name}-{Path(cfg.run_dir).name}",
            config=to_yaml_tree(cfg),
            wandb_id=self.wandb_id,
            start_step=self.step,
            say=self.say,
        )
        self.wandb_id = self.logger.wandb_id
        with StopSignals(self._say) as stop:  # SIGTERM / SIGUSR1: stop after the step in progress
            try:
                before = self._eval_once("before") if cfg.trainer.eval_before_after and self.step == 0 else {}
                # a signal during that evaluation: it is recorded, the warm start waits for the rerun
                self._stop_if_asked(stop)
                warm = self._warm_start() if cfg.stage.warm_start.enable and self.step == 0 else {}
                self.logger.start_progress()
                while self.step < self.total_steps:
                    self._stop_if_asked(stop)
                    metrics = self.train_step()
                    self.logger.log(self.step, metrics)
                    if self.step % cfg.trainer.save_every == 0 or self.step == self.total_steps:
                        with self.watch.measure("checkpoint"):
                            self.save()
                    self._stop_if_asked(stop)
                    val_every = cfg.trainer.val_every
                    if val_every and self.step % val_every == 0 and self.step < self.total_steps:
                        self._eval_logged("val")
                self._stop_if_asked(stop)
                self.updater.release_optimizer_state()  # the last step is checkpointed with it
                after = self._eval_once("after") if cfg.trainer.eval_before_after else {}
                if stop.requested:  # what is left (links and the summary) takes a moment
                    self._say("[preempt] training is complete: writing final/ and the summary, then exiting normally")
                final_dir = self._save_final()
            finally:
                self.logger.close()
        return self._summary(before, after, final_dir, warm)

    def _stop_if_asked(self, stop: StopSignals) -> None:
        """After a signal: the checkpoint of the current step (the regular save, unless this
        step's checkpoint is there already), then ``Preempted`` (exit status 75)."""
        if not stop.requested:
            return
        latest = st.latest_checkpoint(self.cfg.run_dir)
        if self.step > 0 and (latest is None or st.read_meta(latest).step != self.step):
            with self.watch.measure("checkpoint"):
                latest = self.save()
        self._say(stopped_message(self.step, latest))
        raise Preempted(self.step, latest)

    def run_warm_start(self) -> dict[str, Any]:
        """Fine-tune the policy on demonstrations (or reload a finished warm start), the
        generation copy set aside meanwhile and refreshed after (training/engines/local/warm_start.py)."""
        from training.engines.local.warm_start import fingerprint, run_warm_start
        from training.rollout.setup import fixed_subset

        cfg, ws = self.cfg, self.cfg.stage.warm_start
        with self.models.generation_copy_set_aside():
            return run_warm_start(
                self.model,
                self.tokenizer,
                self.agent,
                fixed_subset(self.train_examples, ws.examples, cfg.seed),
                self.limits,
                ws,
                run_dir=cfg.run_dir,
                agent_name=cfg.agent.name,
                expected=fingerprint(cfg, self.model_source, self.limits),
                seed=cfg.seed,
                grad_clip=cfg.optim.grad_clip,
                device=self.device,
                autocast=self.autocast,
                progress="console" in cfg.logger,
                say=self._say,
                spill_dir=self.updater.spill_dir,
                share_prefix=cfg.optim.share_prefix,
            )

    def _warm_start(self) -> dict[str, Any]:
        """SFT on demonstrations before GRPO, logged once; EX after it when asked."""
        result = self.run_warm_start()
        self.models.remember_initial()  # a given model's KL reference: the warm-started one
        if not (self.cfg.resume != "never" and rd.recorded(self.cfg.run_dir, "warm_start", 0)):
            self.logger.log(0, result, kind="warm_start")
        if self.cfg.stage.warm_start.eval_after and self.cfg.trainer.eval_before_after:
            result["ex"] = self._eval_once("warm_start").get("ex")
        return result

    def _eval_logged(self, tag: str) -> dict[str, Any]:
        result = self.evaluate(tag)
        if result:
            record = {k: v for k, v in result.items() if not isinstance(v, dict)}
            self.logger.log(self.step, {**record, "inputs": self._eval_inputs(tag)}, kind=f"eval_{tag}")
        return result

    def _eval_once(self, tag: str) -> dict[str, Any]:
        """Evaluate and log, unless a resumed run already recorded this evaluation at this
        step (killed after it) from the same inputs: then that record is the result, and no
        duplicate is written."""
        if self.cfg.resume != "never":
            found = rd.recorded(self.cfg.run_dir, f"eval_{tag}", self.step)
            if found and found.get("inputs") == self._eval_inputs(tag):
                return found
            if found:
                self._say(
                    f"[resume] the eval_{tag} record at step {self.step} in {self.cfg.run_dir} was made from other "
                    "weights, questions or settings: evaluating again"
                )
        return self._eval_logged(tag)

    def _eval_inputs(self, tag: str) -> str:
        settings = [tag, self.eval_sampling, self.limits, self.cfg.agent, self.cfg.evaluation]
        settings.append(("eval_test_suite", self.cfg.trainer.eval_test_suite))  # a record without it: evaluate again
        if tag == "warm_start":
            settings.append(self.cfg.stage.warm_start)
        return rd.eval_inputs(self.model_source, [ex.id for ex in self.eval_examples], settings)

    def _save_final(self) -> Path:
        return rd.save_final(self.cfg.run_dir, self.step, self.model, self.tokenizer)

    def _summary(
        self, before: dict[str, Any], after: dict[str, Any], final_dir: Path, warm: dict[str, Any]
    ) -> dict[str, Any]:
        """summary.json and the closing lines."""
        head = {
            "recipe": self.cfg.recipe_name,
            "steps": self.step,
            "sweep": self.cfg.sweep,
            "ablation": dict(self.cfg.ablation),
        }
        summary, parts = rd.write_summary(self.cfg.run_dir, head, before, after, warm, final_dir, self.logger.wandb_dir)
        self.say(rd.summary_text(summary, parts))
        return summary


def generation_rows(cfg: Any) -> int:
    """Rows one batched ``generate`` call runs at a time (``rollout.generation_rows``, or
    four micro-batches' worth)."""
    return cfg.rollout.generation_rows or max(1, cfg.optim.micro_batch_size * 4)
