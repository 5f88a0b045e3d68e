"""The dataset stage: the SFT rows, built from the policy's and the teachers' traces
(execution + format filter, leak filter on privileged traces, de-duplicated, capped per
question) or brought by the user (``supervised.dataset``), with pass@k and drops for the card."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from training.supervised import collect as col
from training.supervised import dataset as ds
from training.supervised import filters as flt
from training.supervised.chain_report import counts, pass_summary
from training.supervised.store import digest
from training.supervised.traces import TraceStages


class DatasetStage(TraceStages):
    """The SFT dataset of the chain: mined and taught traces, filtered into conversations."""

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
            f"{counts(saved['dropped'])}"
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
            elif self.sup.max_traces_per_question is not None and len(same) >= self.sup.max_traces_per_question:
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
