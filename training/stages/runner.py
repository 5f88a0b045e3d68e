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
after a kill and reused while its inputs (fingerprint) are unchanged. The RL filter keeps
questions of the supervised subset (``supervised.questions``), and RL draws from
those; without the filter RL uses the whole training split, as ``stage=rl`` does.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.types import Example, Message
from training.stages import collect as col
from training.stages import dataset as ds
from training.stages import filters as flt
from training.stages.store import StageDir, digest, write_json_atomic

SUPERVISED = "supervised"


def run_stage(cfg: Any, inputs: Any = None, say: Any = print) -> dict[str, Any]:
    """Run ``cfg.stage.name`` (data, sft or sft_rl) and return its summary."""
    from training.engines.local import LocalTrainer, TrainerInputs, quiet_libraries

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


def chain_of(cfg: Any) -> str:
    sup = cfg.supervised
    if sup.chain != "auto":
        return sup.chain
    return "mine" if cfg.agent.name in ("retoolsql", "dualsql") else "annotate"


class Chain:
    """The stages of one run, sharing the trainer's policy, agent, data and limits."""

    def __init__(self, trainer: Any, root: Path, say: Any) -> None:
        from rex import ExecScorer
        from training.rollout_setup import fixed_subset

        self.t, self.root, self.say = trainer, root, say
        self.cfg = trainer.cfg
        self.sup = self.cfg.supervised
        self.chain = chain_of(self.cfg)
        self.privileged = self.sup.privileged if self.sup.privileged is not None else self.chain == "mine"
        self.questions = fixed_subset(trainer.train_examples, self.sup.questions, self.cfg.seed)
        self.by_id = {ex.id: ex for ex in trainer.train_examples}
        self.correct = col.execution_match(ExecScorer())
        self.chunk = max(1, self.cfg.algorithm.batch_size)
        self.sft_dir: Path | None = None

    # ------------------------------------------------------------------ fingerprints
    def base_fingerprint(self) -> dict[str, Any]:
        c = self.cfg
        return {
            "model": self.t.model_source,
            "agent": c.agent.name,
            "agent_options": dict(c.agent.options),
            "data": [c.data.kind, c.data.root, c.data.split, c.data.limit],
            "seed": c.seed,
            "limits": dataclasses.asdict(self.t.limits),
            "questions": digest([ex.id for ex in self.questions]),
        }

    def stage(self, name: str, fingerprint: dict[str, Any]) -> StageDir:
        return StageDir(self.root / name, fingerprint, self.say)

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

    # ------------------------------------------------------------------ traces
    def policy_run(self, temperature: float, served: Any = None) -> Any:
        """Episodes of the policy: its local ``generate``, or ``served``: an endpoint client
        of a served copy of it (``supervised.policy_endpoint``, the GPU route where vLLM
        serves the policy), our tools running here."""
        from tools import get_database
        from training.generation import PolicySource, run_source_episodes

        r = self.cfg.rollout
        sampling = dataclasses.replace(self.t.sampling, temperature=temperature, top_p=r.top_p)
        source: Any = served if served is not None else PolicySource(self.t.generate)

        def run(questions: list[Example], k: int) -> Any:
            requests = [(ex, get_database(ex.db_path), s) for ex in questions for s in range(k)]
            return run_source_episodes(self.t.agent, requests, self.t.tokenizer, source, sampling, self.t.limits)

        return run

    def mine(
        self, name: str, k: int, questions: Sequence[Example], extra: dict[str, Any], initial: bool = False
    ) -> dict[str, dict]:
        """pass@k of the current policy: per question id, its record (samples, correct, band).

        ``initial``: the policy before SFT, which ``supervised.policy_endpoint`` may serve;
        after SFT the local (SFT) weights always answer.
        """
        served = initial and self.sup.policy_endpoint is not None
        fp = {
            **self.base_fingerprint(),
            **extra,
            "k": k,
            "temperature": self.sup.temperature,
            "ids": digest([ex.id for ex in questions]),
        }
        if served:
            ep = self.sup.policy_endpoint or {}
            fp["policy_endpoint"] = [ep["base_url"], ep["model"]]
        stage = self.stage(name, fp)
        saved = stage.finished()
        if saved is None:
            stage.open()
            client = None
            if served:
                from training.generation import EndpointSource, endpoint_from_mapping

                client = EndpointSource(endpoint_from_mapping(self.sup.policy_endpoint or {}, self.cfg.agent.name))
                self.say(f"[{name}] the policy answers through {client.name}; tools run here")
            try:
                store = col.collect(
                    stage,
                    questions,
                    self.policy_run(self.sup.temperature, client),
                    k,
                    "policy",
                    self.correct,
                    self.chunk,
                    self.say,
                )
            finally:
                if client is not None:
                    client.close()
            records = store.pass_at("policy")
            summary = pass_summary(records, k)
            if client is not None:
                summary["endpoint"] = dict(client.stats)
            stage.finish(summary)
        store = col.open_collection(stage)
        records = store.pass_at("policy")
        self.say(
            f"[{name}] pass@{k} {pass_summary(records, k)['pass_at_k']:.3f} on {len(records)} questions; "
            f"bands {pass_summary(records, k)['bands']}"
        )
        return records

    def teachers(self) -> list[tuple[str, Any]]:
        from training.generation import EndpointSource, LocalChatSource, endpoint_from_mapping

        out: list[tuple[str, Any]] = []
        for i, spec in enumerate(self.sup.teachers):
            if "base_url" in spec:
                out.append((f"teacher{i}", EndpointSource(endpoint_from_mapping(spec, self.cfg.agent.name))))
            else:
                from training.model import load_model

                loaded = load_model(spec["path"], self.t.device, say=self.say)
                out.append(
                    (f"teacher{i}", LocalChatSource(loaded.model, loaded.tokenizer, self.t.device, spec["path"]))
                )
        if not out:
            out.append(("teacher0", LocalChatSource(self.t.gen_model, self.t.tokenizer, self.t.device, "policy")))
        return out

    def annotate(self, questions: Sequence[Example], extra: dict[str, Any]) -> col.Collection:
        """Every teacher on ``questions``: greedy and/or sampled, privileged or not."""
        from tools import get_database
        from training.generation import run_source_episodes

        sup = self.sup
        fp = {
            **self.base_fingerprint(),
            **extra,
            "teachers": sup.teachers,
            "greedy": sup.teacher_greedy,
            "samples": sup.teacher_samples,
            "temperature": sup.teacher_temperature,
            "privileged": self.privileged,
            "ids": digest([ex.id for ex in questions]),
        }
        stage = self.stage("teachers", fp)
        if stage.finished() is not None:
            return col.open_collection(stage)
        stage.open()
        transform = guide if self.privileged else None
        stats: dict[str, Any] = {}
        for name, source in self.teachers() if questions else []:
            modes = ([("greedy", 0.0, 1)] if sup.teacher_greedy else []) + (
                [("sampled", sup.teacher_temperature, sup.teacher_samples)] if sup.teacher_samples else []
            )
            for mode, temperature, k in modes:
                sampling = dataclasses.replace(self.t.sampling, temperature=temperature)

                def run(qs: list[Example], n: int, source: Any = source, sampling: Any = sampling) -> Any:
                    requests = [(ex, get_database(ex.db_path), s) for ex in qs for s in range(n)]
                    return run_source_episodes(
                        self.t.agent, requests, self.t.tokenizer, source, sampling, self.t.limits, transform
                    )

                col.collect(stage, questions, run, k, f"{name}-{mode}", self.correct, self.chunk, self.say)
            stats[name] = {"source": source.name, **dict(getattr(source, "stats", {}))}
            if hasattr(source, "close"):
                source.close()
        stage.finish({"teachers": stats})
        return col.open_collection(stage)

    # ------------------------------------------------------------------ dataset
    def data(self) -> dict[str, Any]:
        """The SFT rows (built or brought), with pass@k and drops for the card."""
        if self.sup.dataset:
            rows = ds.read_rows(self.sup.dataset)
            self.say(f"[dataset] {len(rows)} rows from {self.sup.dataset} (brought by the user)")
            return {
                "rows": len(rows),
                "dataset": str(self.sup.dataset),
                "path": Path(self.sup.dataset),
                "digest": digest(rows),
                "dropped": {},
            }
        bands: dict[str, dict] = {}
        if self.chain == "mine":
            bands = self.mine("mine", self.sup.samples, self.questions, {}, initial=True)
            targets = [ex for ex in self.questions if bands[ex.id]["band"] == "all_wrong"]
            self.say(
                f"[teachers] {len(targets)} all-wrong questions go to the "
                f"{'privileged ' if self.privileged else ''}"
                "teacher(s)"
            )
        else:
            targets = list(self.questions)
        teacher = self.annotate(targets, {"bands": digest(bands)})
        mined = col.open_collection(self.root_stage("mine")).traces.rows() if self.chain == "mine" else []
        fp = {
            "mine": digest(bands),
            "teachers": digest(sorted(str(col.trace_key(r)) for r in teacher.traces.rows())),
            "leak": [self.sup.leak_filter, self.sup.leak_similarity, self.privileged],
            "cap": self.sup.max_traces_per_question,
        }
        stage = self.stage("dataset", fp)
        saved = stage.finished()
        if saved is None:
            stage.open()
            rows, dropped = self.select(mined, teacher.traces.rows(), bands)
            card: dict[str, Any] = {
                "design": self.cfg.agent.name,
                "chain": self.chain,
                "dropped": dropped,
                "teachers": [{k: v for k, v in t.items() if k != "api_key"} for t in self.sup.teachers]
                or ["the policy itself"],
                "settings": dataclasses.asdict(self.sup),
                "pass_at_k": pass_summary(bands, self.sup.samples) if bands else None,
            }
            card = ds.write_dataset(stage.path, rows, card)
            saved = stage.finish({"rows": len(rows), "dropped": dropped, "card": card, "digest": digest(rows)})
        self.say(
            f"[dataset] {saved['rows']} conversations kept in {stage.path / ds.TRAIN_JSONL}; dropped: "
            f"{_counts(saved['dropped'])}"
        )
        result = {
            "rows": saved["rows"],
            "dropped": saved["dropped"],
            "dataset": str(stage.path),
            "path": stage.path,
            "digest": saved["digest"],
            "bands": bands,
        }
        if bands:
            result["pass_at_k"] = pass_summary(bands, self.sup.samples)
        return result

    def root_stage(self, name: str) -> StageDir:
        return StageDir(self.root / name, {}, self.say)

    def select(self, mined: list[dict], taught: list[dict], bands: dict[str, dict]) -> tuple[list[dict], dict]:
        """Filter, de-duplicate and cap traces; every drop counted by reason."""
        dropped: dict[str, int] = {}
        kept: dict[str, list[dict]] = {}

        def drop(reason: str) -> None:
            dropped[reason] = dropped.get(reason, 0) + 1

        candidates = [t for t in mined if bands.get(t["question_id"], {}).get("band") != "all_wrong"]
        greedy_first = sorted(taught, key=lambda t: (not t["source"].endswith("greedy"), t["source"], t["sample"]))
        for trace in candidates + greedy_first:
            reason = flt.quality_reason(trace)
            if reason is None and self.privileged and self.sup.leak_filter and trace["source"] != "policy":
                gold = self.by_id[trace["question_id"]].gold_sql
                reason = next(
                    (
                        f"leak_{r}"
                        for e in trace["episodes"]
                        if (r := flt.leak_reason([t["text"] for t in e["turns"]], gold, self.sup.leak_similarity))
                    ),
                    None,
                )
            if reason is not None:
                drop(reason)
                continue
            same = kept.setdefault(trace["question_id"], [])
            texts = [[t["text"] for t in e["turns"]] for e in trace["episodes"]]
            if any(texts == [[t["text"] for t in e["turns"]] for e in other["episodes"]] for other in same):
                drop("duplicate")
            elif len(same) >= self.sup.max_traces_per_question:
                drop("over_cap")
            else:
                same.append(trace)
        band_of = {q: r["band"] for q, r in bands.items()}
        rows = [
            ds.dataset_row(t, band_of.get(t["question_id"], "not_mined"))
            for ex in self.questions
            for t in kept.get(ex.id, [])
        ]
        return rows, dropped

    # ------------------------------------------------------------------ SFT
    def fine_tune(self, data: dict[str, Any]) -> dict[str, Any]:
        from training.engines.local_warm_start import load_weights, save_warm_start
        from training.warm_start import WarmStartSettings, supervised_fine_tune

        sup = self.sup
        settings = WarmStartSettings(
            epochs=sup.epochs,
            lr=sup.lr,
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
                load_weights(self.t.model, stage.path)
                self.t._sync_generation_copy()
            self.say(f"[sft] reusing the finished SFT in {stage.path}")
            return {**saved, "fingerprint": digest(fp)}
        rows = ds.read_rows(data["path"]) if data["rows"] else []
        trajectories, dropped = ds.replay(
            self.t.agent, rows, self.by_id, self.t.tokenizer, self.t.limits, sup.drop_phases
        )
        if not trajectories:
            self.say(
                f"[sft] 0 conversations to train on ({data['rows']} rows, replay drops: {_counts(dropped)}): "
                "SFT skipped, the policy is unchanged (nothing is padded in)"
            )
            stage.open()
            return {
                **stage.finish({"steps": 0, "conversations": 0, "replay_dropped": dropped}),
                "fingerprint": digest(fp),
            }
        self.say(
            f"[sft] {len(trajectories)} episodes from {len(rows)} conversations (replay drops: {_counts(dropped)})"
        )
        result: dict[str, Any] = supervised_fine_tune(
            self.t.model,
            trajectories,
            settings,
            self.t.tokenizer.pad_token_id,
            self.t.device,
            self.t.autocast,
            seed=self.cfg.seed,
            progress="console" in self.cfg.logger,
        )
        self.t._sync_generation_copy()
        result.update(
            {"conversations": float(len(rows)), "episodes": float(len(trajectories)), "replay_dropped": dropped}
        )
        self.say(
            f"[sft] {int(result['steps'])} steps, NLL {result['nll_first']:.3f} -> {result['nll_last']:.3f} "
            f"on {int(result['policy_tokens'])} policy tokens ({result['duration_s']:.0f}s) -> {stage.path}"
        )
        stage.open()
        save_warm_start(self.t.model, self.t.tokenizer, stage.path, {"note": "see done.json"}, result)
        return {**stage.finish(result), "fingerprint": digest(fp)}

    # ------------------------------------------------------------------ RL
    def reinforce(self, inputs: Any) -> dict[str, Any]:
        """GRPO from the SFT weights (the KL reference too), on the RL filter's questions."""
        from training.engines.local import LocalTrainer, TrainerInputs

        pool = list(self.t.train_examples)
        if self.sup.rl_filter:
            k, need = self.sup.rl_filter_samples, self.sup.rl_filter_pass
            records = self.mine(
                "rl_filter", k, self.questions, {"sft": str(self.sft_dir), "sft_done": _read_done(self.sft_dir)}
            )
            pool = [ex for ex in self.questions if records[ex.id]["correct"] < need]
            self.say(
                f"[rl filter] {len(pool)} of {len(self.questions)} questions solved < {need}/{k} times by the "
                "SFT policy go to RL"
            )
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


# ----------------------------------------------------------------------------- helpers


def guide(ex: Example, messages: list[Message]) -> list[Message]:
    """The privileged teacher's view: the agent's own first user message plus the gold SQL."""
    out = [dict(m) for m in messages]
    for m in out:
        if m.get("role") == "user":
            m["content"] = str(m.get("content", "")) + flt.guidance_text(ex.gold_sql)
            break
    return out


def pass_summary(records: dict[str, dict], k: int) -> dict[str, Any]:
    bands = {b: sum(r["band"] == b for r in records.values()) for b in col.BANDS}
    n = len(records) or 1
    return {
        "k": k,
        "questions": len(records),
        "pass_at_k": sum(r["correct"] > 0 for r in records.values()) / n,
        "mean_correct": sum(r["correct"] / max(r["samples"], 1) for r in records.values()) / n,
        "bands": bands,
        "failed_requests": sum(r.get("failed", 0) for r in records.values()),
    }


def hard_gained(before: dict[str, dict], after: dict[str, dict]) -> dict[str, int]:
    hard = [q for q, r in before.items() if r["band"] == "all_wrong"]
    return {"hard_before": len(hard), "solved_after": sum(after.get(q, {}).get("correct", 0) > 0 for q in hard)}


def _counts(items: dict[str, int]) -> str:
    return ", ".join(f"{n} x {why}" for why, n in sorted(items.items())) or "none"


def _read_done(path: Path | None) -> Any:
    done = (path / "done.json") if path else None
    return json.loads(done.read_text()).get("fingerprint") if done and done.exists() else None


def describe_summary(s: dict[str, Any]) -> str:
    def ex(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}"

    lines = [
        f"[summary] {s['recipe']} stage={s['stage']} (chain {s['chain']}), {s['questions']} questions, "
        f"{s.get('wall_time_s', 0):.0f}s"
    ]
    if s.get("pass_at_k"):
        p = s["pass_at_k"]
        lines.append(f"    pass@{p['k']} before SFT {p['pass_at_k']:.3f}; bands {p['bands']}")
    if s.get("pass_at_k_after_sft"):
        p = s["pass_at_k_after_sft"]
        lines.append(f"    pass@{p['k']} after SFT {p['pass_at_k']:.3f}; hard questions gained {s.get('hard_gained')}")
    lines.append(f"    SFT dataset: {s.get('rows', 0)} conversations; dropped {_counts(s.get('dropped') or {})}")
    lines.append(
        f"    EX before {ex(s.get('ex_before'))} -> after SFT {ex(s.get('ex_after_sft'))}"
        + (f" -> after RL {ex(s.get('ex_after_rl'))}" if s["stage"] == "sft_rl" else "")
    )
    return "\n".join(lines)
