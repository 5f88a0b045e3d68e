"""``stage=data | sft | sft_rl`` on the local engine: each design's supervised chain.

    mine (chain=mine: ReToolSQL, DualSQL as an option)
        k samples per question with the current policy -> pass@k and bands
        -> own correct traces for solved questions
        -> a privileged teacher (the agent's prompt + the gold SQL as guidance; greedy and
           sampled) on all-wrong questions
    annotate (chain=annotate: TRUST-SQL, Think2SQL)
        every teacher on every question (unprivileged)
    -> filters (execution + format on every trace; the leak filter on privileged ones)
    -> dataset (``supervised/dataset``: JSONL/Parquet + data card)
    -> SFT (``supervised/sft``: an HF checkpoint; SFT reuses the warm start's loss/loop)
    -> RL filter (TRUST-SQL: keep questions the SFT policy solves < 6 of 8 times)
    -> GRPO from the SFT weights (also the KL reference)

Every stage lives in its own directory under ``<run_dir>/supervised``; it is resumed
after a kill and reused while its inputs (fingerprint) are unchanged. Two datasets: the SFT
questions come from ``supervised.data`` (null: ``data``), RL's from ``data``. The RL filter
samples RL's questions (``supervised.rl_questions`` of them, null = all) with the SFT policy
at RL's temperature and keeps the ones it solves less than ``rl_filter_pass`` times; without
the filter RL uses them all, as ``stage=rl`` does.

The chain is built up by what each part does: ``context.py`` (what the stages share),
``traces.py`` (mine, annotate), ``dataset_stage.py`` (filters -> dataset) and here SFT,
the RL filter and RL; ``summary.py`` formats what the run reports.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any

from training.rollout.setup import fixed_subset
from training.supervised import dataset as ds
from training.supervised.chain_report import counts, describe_summary, hard_gained, pass_summary
from training.supervised.dataset_stage import DatasetStage
from training.supervised.store import digest, write_json_atomic

SUPERVISED = "supervised"


def run_stage(cfg: Any, inputs: Any = None, say: Any = print) -> dict[str, Any]:
    """Run ``cfg.stage.name`` (data, sft or sft_rl) and return its summary."""
    from training.engines.local.trainer import LocalTrainer, TrainerInputs, quiet_libraries

    quiet_libraries()
    start = time.perf_counter()
    root = Path(cfg.run_dir) / SUPERVISED
    if cfg.fresh and root.exists():
        shutil.rmtree(root)
    base = dataclasses.replace(
        cfg, stage=dataclasses.replace(cfg.stage, warm_start=dataclasses.replace(cfg.stage.warm_start, enable=False))
    )
    trainer = LocalTrainer(base, inputs or TrainerInputs(), say)
    chain = Chain(trainer, root, say)
    summary = chain.run()
    if cfg.stage.name == "sft_rl":
        summary["rl"] = chain.reinforce(inputs)
        summary["ex_after_sft"] = summary["rl"].get("ex_before")
        summary["ex_after_rl"] = summary["rl"].get("ex_after")
    summary["wall_time_s"] = round(time.perf_counter() - start, 1)
    root.mkdir(parents=True, exist_ok=True)
    write_json_atomic(root / "summary.json", summary)
    say(describe_summary(summary))
    return summary


class Chain(DatasetStage):
    """The stages of one run, sharing the trainer's policy, agent, data and limits."""

    # ------------------------------------------------------------------ the chain
    def run(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "recipe": self.cfg.recipe_name,
            "stage": self.cfg.stage.name,
            "chain": self.chain,
            "run_dir": str(self.cfg.run_dir),
            "questions": len(self.questions),
        }
        summary["ex_before"] = self.evaluate("before", self.base_fingerprint())
        data = self.data()
        summary.update({k: data[k] for k in ("pass_at_k", "dataset", "rows", "dropped") if k in data})
        if self.cfg.stage.name == "data":
            return summary
        before = data.get("bands") or {}
        if self.sup.passk_after and not before:  # annotate chains mine no pass@k: measure it before SFT
            before = self.mine("passk_before_sft", self.sup.samples, self.questions, {}, initial=True)
            summary["pass_at_k"] = pass_summary(before, self.sup.samples)
        sft = self.fine_tune(data)
        summary["sft"] = sft
        if self.cfg.stage.name == "sft":
            summary["ex_after_sft"] = self.evaluate("after_sft", {"sft": sft.get("fingerprint")})
        if self.sup.passk_after:
            after = self.mine("passk_after_sft", self.sup.samples, self.questions, {"sft": sft.get("fingerprint")})
            summary["pass_at_k_after_sft"] = pass_summary(after, self.sup.samples)
            summary["hard_gained"] = hard_gained(before, after)
        return summary

    def evaluate(self, tag: str, fingerprint: dict[str, Any]) -> float | None:
        if not self.cfg.trainer.eval_before_after:
            return None
        stage = self.stage(f"eval_{tag}", {**fingerprint, "eval": [ex.id for ex in self.t.eval_examples]})
        saved = stage.finished()
        if saved is not None:
            return saved.get("ex")
        stage.open()
        result = self.t.evaluate(tag)
        return stage.finish({k: v for k, v in result.items() if not isinstance(v, dict)}).get("ex")

    # ------------------------------------------------------------------ SFT
    def fine_tune(self, data: dict[str, Any]) -> dict[str, Any]:
        from training.engines.local.warm_start import load_warm_start, save_warm_start
        from training.supervised.fine_tune import WarmStartSettings, supervised_fine_tune

        sup = self.sup
        settings = WarmStartSettings(
            epochs=sup.epochs,
            lr=sup.learning_rate,
            batch_size=sup.batch_size,
            micro_batch_size=sup.micro_batch_size,
            warmup_ratio=sup.warmup_ratio,
            grad_clip=self.cfg.optim.grad_clip,
        )
        fp = {
            **self.base_fingerprint(),
            "dataset": data["digest"],
            "settings": dataclasses.asdict(settings),
            "drop_phases": list(sup.drop_phases),
        }
        stage = self.stage("sft", fp)
        self.sft_dir = stage.path
        saved = stage.finished()
        if saved is not None:
            if saved.get("steps"):
                load_warm_start(self.t.model, stage.path)
                self.t._sync_generation_copy()
            self.say(f"[sft] reusing the finished SFT in {stage.path}")
            return {**saved, "fingerprint": digest(fp)}
        stage.open()  # before training, so a stale directory is announced and cleared first
        rows = ds.read_rows(data["path"]) if data["rows"] else []
        trajectories, dropped = ds.replay(
            self.t.agent, rows, self.by_id, self.t.tokenizer, self.t.limits, sup.drop_phases
        )
        if not trajectories:
            self.say(
                f"[sft] 0 conversations to train on ({data['rows']} rows, replay drops: {counts(dropped)}): "
                "SFT skipped, the policy is unchanged (nothing is padded in)"
            )
            return {
                **stage.finish({"steps": 0, "conversations": 0, "replay_dropped": dropped}),
                "fingerprint": digest(fp),
            }
        self.say(f"[sft] {len(trajectories)} episodes from {len(rows)} conversations (replay drops: {counts(dropped)})")
        with self.t.models.generation_copy_set_aside():  # refreshed from the new weights after
            result: dict[str, Any] = supervised_fine_tune(
                self.t.model,
                trajectories,
                settings,
                self.t.tokenizer.pad_token_id,
                self.t.device,
                self.t.autocast,
                seed=self.cfg.seed,
                progress="console" in self.cfg.logger,
                spill_dir=self.t.updater.spill_dir,
                share_prefix=self.cfg.optim.share_prefix,
            )
        result.update(
            {"conversations": float(len(rows)), "episodes": float(len(trajectories)), "replay_dropped": dropped}
        )
        self.say(
            f"[sft] {int(result['steps'])} steps, NLL {result['nll_first']:.3f} -> {result['nll_last']:.3f} "
            f"on {int(result['policy_tokens'])} policy tokens ({result['duration_s']:.0f}s) -> {stage.path}"
        )
        save_warm_start(self.t.model, self.t.tokenizer, stage.path, {"note": "see done.json"}, result)
        return {**stage.finish(result), "fingerprint": digest(fp)}

    # ------------------------------------------------------------------ RL
    def reinforce(self, inputs: Any) -> dict[str, Any]:
        """GRPO from the SFT weights (the KL reference too), on the RL filter's questions."""
        from training.engines.local.trainer import LocalTrainer, TrainerInputs

        pool = self.rl_pool({"sft": str(self.sft_dir), "sft_done": _read_done(self.sft_dir)})
        if not pool:
            self.say("[rl filter] no question left for RL: the SFT policy solves them all; RL skipped")
            return {"skipped": "no question left after the RL filter", "ex_before": None, "ex_after": None}
        cfg = dataclasses.replace(
            self.cfg,
            stage=dataclasses.replace(
                self.cfg.stage,
                name="rl",
                init_from=str(self.sft_dir),
                warm_start=dataclasses.replace(self.cfg.stage.warm_start, enable=False),
            ),
        )
        given = inputs if inputs is not None else TrainerInputs()
        rl_inputs = TrainerInputs(
            model=self.t.model,
            tokenizer=self.t.tokenizer,
            model_source=str(self.sft_dir),
            train_examples=pool,
            eval_examples=self.t.eval_examples,
            generate=given.generate,
        )
        summary = LocalTrainer(cfg, rl_inputs, self.say).fit()
        summary["questions"] = len(pool)
        return summary

    def rl_candidates(self) -> list[Any]:
        """RL's questions before the filter: the RL data's (``data``; not the SFT questions of
        ``supervised.data``), a seeded subset of ``supervised.rl_questions`` when set."""
        return fixed_subset(self.t.train_examples, self.sup.rl_questions, self.cfg.seed)

    def rl_temperature(self) -> float:
        """The RL filter samples as RL does: ``rollout.temperature`` unless
        ``supervised.rl_filter_temperature`` says otherwise."""
        chosen = self.sup.rl_filter_temperature
        return self.cfg.rollout.temperature if chosen is None else chosen

    def rl_pool(self, sft: dict[str, Any]) -> list[Any]:
        """The questions RL trains on: with ``supervised.rl_filter``, those of the RL data the
        current (SFT) policy solves fewer than ``rl_filter_pass`` of ``rl_filter_samples``
        times at RL's temperature (``sft`` names the weights, for the stage's fingerprint);
        without it, every RL candidate."""
        candidates = self.rl_candidates()
        if not self.sup.rl_filter:
            return candidates
        k, need, temperature = self.sup.rl_filter_samples, self.sup.rl_filter_pass, self.rl_temperature()
        records = self.mine("rl_filter", k, candidates, sft, temperature=temperature)
        pool = [ex for ex in candidates if records[ex.id]["correct"] < need]
        self.say(
            f"[rl filter] {len(pool)} of {len(candidates)} questions solved < {need}/{k} times by the "
            f"SFT policy (temperature {temperature}) go to RL"
        )
        return pool


def rl_filter_file(cfg: Any, inputs: Any = None, say: Any = print) -> Path | None:
    """The RL filter of an ``engine=verl`` chain: ``cfg`` is the local stage config whose
    ``stage.init_from`` is veRL's SFT checkpoint (on this node's GPU when it has one, as
    ``stage=data`` runs). Writes the kept ids to ``supervised/rl_filter/questions.json`` for
    the RL run's ``data.train_ids``; None when the SFT policy solves every question."""
    from training.engines.local.run_files import weights_identity
    from training.engines.local.trainer import LocalTrainer, TrainerInputs

    base = dataclasses.replace(
        cfg, stage=dataclasses.replace(cfg.stage, warm_start=dataclasses.replace(cfg.stage.warm_start, enable=False))
    )
    chain = Chain(LocalTrainer(base, inputs or TrainerInputs(), say), Path(cfg.run_dir) / SUPERVISED, say)
    pool = chain.rl_pool({"sft": weights_identity(str(cfg.stage.init_from))})
    if not pool:
        say("[rl filter] no question left for RL: the SFT policy solves them all; RL skipped")
        return None
    out = chain.root / "rl_filter" / "questions.json"
    write_json_atomic(out, {"ids": [ex.id for ex in pool], "questions": len(chain.rl_candidates())})
    return out


def _read_done(path: Path | None) -> Any:
    done = (path / "done.json") if path else None
    return json.loads(done.read_text()).get("fingerprint") if done and done.exists() else None
