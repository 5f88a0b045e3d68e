"""The trace stages: ``mine`` (k samples per question with the current policy -> pass@k and
bands, the policy's own traces) and ``annotate`` (every teacher on the given questions,
greedy and/or sampled, privileged or not)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from agents.types import Example, Message
from training.supervised import collect as col
from training.supervised import filters as flt
from training.supervised.chain_report import pass_summary
from training.supervised.context import ChainContext
from training.supervised.store import digest


class TraceStages(ChainContext):
    """The stages that produce traces: the policy's (``mine``) and the teachers' (``annotate``)."""

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
        self,
        name: str,
        k: int,
        questions: Sequence[Example],
        extra: dict[str, Any],
        initial: bool = False,
        temperature: float | None = None,
    ) -> dict[str, dict]:
        """pass@k of the current policy: per question id, its record (samples, correct, band).

        ``initial``: the policy before SFT, which ``supervised.policy_endpoint`` may serve;
        after SFT the local (SFT) weights always answer. ``temperature``: the sampling
        temperature (None: ``supervised.temperature``; the RL filter passes RL's).
        """
        served = initial and self.sup.policy_endpoint is not None
        temperature = self.sup.temperature if temperature is None else temperature
        fp = {
            **self.base_fingerprint(),
            **extra,
            "k": k,
            "temperature": temperature,
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
                from training.generation.endpoint import EndpointSource, endpoint_from_mapping

                client = EndpointSource(endpoint_from_mapping(self.sup.policy_endpoint or {}, self.cfg.agent.name))
                self.say(f"[{name}] the policy answers through {client.name}; tools run here")
            try:
                store = col.collect(
                    stage,
                    questions,
                    self.policy_run(temperature, client),
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
            f"[{name}] pass@{k} {pass_summary(records, k)['pass_at_k']:.3f} on {len(records)} questions "
            f"(temperature {temperature}); "
            f"bands {pass_summary(records, k)['bands']}"
        )
        return records

    def teachers(self) -> list[tuple[str, Any]]:
        from training.generation.endpoint import EndpointSource, endpoint_from_mapping
        from training.generation.sources import LocalChatSource

        out: list[tuple[str, Any]] = []
        for i, spec in enumerate(self.sup.teachers):
            if "base_url" in spec:
                out.append((f"teacher{i}", EndpointSource(endpoint_from_mapping(spec, self.cfg.agent.name))))
            else:
                from training.generation.loading import load_model

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


def guide(ex: Example, messages: list[Message]) -> list[Message]:
    """The privileged teacher's view: the agent's own first user message plus the gold SQL."""
    out = [dict(m) for m in messages]
    for m in out:
        if m.get("role") == "user":
            m["content"] = str(m.get("content", "")) + flt.guidance_text(ex.gold_sql)
            break
    return out
