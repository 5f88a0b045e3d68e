"""The advantage step's math on veRL rows (``workers.row_advantages``); the loop itself is proven
through veRL's real ``fit()`` in ``tests/training/engines/verl/fit/``.

Rows are built the way veRL's v1 agent-loop worker stores them (one per agent-loop
output, keyed ``{uid}_{session}_{index}``, ``extra_fields`` written by our agent loop).
Expected advantages are computed here by hand - ``(r - group mean) / (unbiased std +
eps)`` - independently of the code under test.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import AdvantageEstimator
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from training.engines.verl.workers import sync_trainer as T
from training.engines.verl.workers.reward_adapter import REWARD_KEY

EPS = 1e-6


def row(
    uid: str, role: str, mask: list[int], full: float, schema: float | None = None, schema_mask: list[int] | None = None
) -> dict[str, Any]:
    tracks = {"full": full} if schema is None else {"full": full, "schema": schema}
    return {
        "uid": uid,
        "response_mask": torch.tensor(mask),
        "extra_fields": {
            T.EPISODE_KEY: {"role": role, "schema_mask": schema_mask or [0] * len(mask), "num_turns": 2},
            REWARD_KEY: {"total": full, "components": {"exec": full}, "tracks": tracks, "error": None},
        },
    }


def as_proto(rows: list[dict[str, Any]]) -> DataProto:
    td = list_of_dict_to_tensordict(rows).to_padded_tensor()
    return DataProto(
        batch=TensorDict({"response_mask": td["response_mask"]}, batch_size=len(rows)),
        non_tensor_batch={
            "uid": np.array(list(td["uid"]), dtype=object),
            "extra_fields": np.array(list(td["extra_fields"]), dtype=object),
        },
    )


def normalised(values: list[float]) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    return (v - v.mean()) / (v.std(ddof=1) + EPS)


def dualsql_rows() -> tuple[list[dict[str, Any]], list[str]]:
    """One question (uid ``u1``), G = 3 sessions, each a linker row then a generator row."""
    linker = [0.9, 0.2, 0.5]
    generator = [1.1, 0.0, 0.0]
    rows, keys = [], []
    for s in range(3):
        rows.append(row("u1", "linker", [1, 1, 1, 0], linker[s]))
        rows.append(row("u1", "generator", [1, 1, 0, 1, 1], generator[s]))
        keys += [f"u1_{s}_0", f"u1_{s}_1"]
    return rows, keys


def test_dualsql_groups_per_role_use_each_rows_own_reward() -> None:
    rows, _ = dualsql_rows()
    data, metrics = T.phase_aware_advantages(as_proto(rows), T.AdvantageSettings(epsilon=EPS))
    adv = data.batch["advantages"]  # [6, 5]
    mask = data.batch["response_mask"].float()
    linker_expected = normalised([0.9, 0.2, 0.5])
    generator_expected = normalised([1.1, 0.0, 0.0])
    for s in range(3):
        torch.testing.assert_close(adv[2 * s], float(linker_expected[s]) * mask[2 * s])
        torch.testing.assert_close(adv[2 * s + 1], float(generator_expected[s]) * mask[2 * s + 1])
    torch.testing.assert_close(data.batch["returns"], adv)
    assert metrics["sqlagent/linker/reward/mean"] == pytest.approx(np.mean([0.9, 0.2, 0.5]))
    assert metrics["sqlagent/reward_errors"] == 0.0


def test_builtin_grpo_would_broadcast_the_generator_advantage_to_the_linker() -> None:
    """Why the subclass exists: veRL's multi-output GRPO uses only each session's last row."""
    rows, keys = dualsql_rows()
    proto = as_proto(rows)
    scores = torch.zeros_like(proto.batch["response_mask"], dtype=torch.float32)
    for i, r in enumerate(rows):  # rm_scores as veRL stores them: the total at the last token
        scores[i, int(r["response_mask"].shape[0]) - 1] = r["extra_fields"][REWARD_KEY]["total"]
    proto.batch["token_level_rewards"] = scores
    builtin = compute_advantage_for_multi_trajectories(
        proto, batch_keys=keys, adv_estimator=AdvantageEstimator.GRPO, num_repeat=3
    )
    ours, _ = T.phase_aware_advantages(as_proto(rows), T.AdvantageSettings(epsilon=EPS))
    # built-in: the linker row of session 0 gets the generator's advantage
    builtin_adv = builtin.batch["advantages"].tolist()  # plain floats: pytest.approx cannot iterate 0-d tensors
    ours_adv = ours.batch["advantages"].tolist()
    assert builtin_adv[0][0] == pytest.approx(builtin_adv[1][0], abs=1e-5)
    assert ours_adv[0][0] == pytest.approx(float(normalised([0.9, 0.2, 0.5])[0]), abs=1e-4)
    assert ours_adv[0][0] != pytest.approx(ours_adv[1][0], abs=1e-3)


def test_question_grouping_pools_roles() -> None:
    rows, _ = dualsql_rows()
    data, _ = T.phase_aware_advantages(as_proto(rows), T.AdvantageSettings(epsilon=EPS, group_by="question"))
    pooled = normalised([0.9, 1.1, 0.2, 0.0, 0.5, 0.0])
    firsts = data.batch["advantages"][:, 0]
    np.testing.assert_allclose(firsts.numpy(), pooled, rtol=1e-4, atol=1e-5)


def test_two_track_schema_advantage_only_on_the_prefix() -> None:
    # TRUST-SQL: 4 samples of one question; tokens 0-2 are the propose prefix
    masks = [[1, 1, 0, 1, 1, 1], [1, 1, 0, 1, 1, 0], [1, 0, 0, 1, 1, 1], [1, 1, 0, 1, 0, 0]]
    prefix = [[1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]  # last: no propose turn
    full, schema = [1.1, 0.2, 0.0, 1.1], [1.0, 0.0, 0.0, 1.0]
    rows = [row("q", "agent", m, f, s, p) for m, f, s, p in zip(masks, full, schema, prefix, strict=True)]
    settings = T.AdvantageSettings(estimator="two_track", epsilon=EPS, clamp=10.0, schema_weight=0.25)
    data, metrics = T.phase_aware_advantages(as_proto(rows), settings)
    mask = torch.tensor(masks, dtype=torch.float32)
    schema_mask = torch.tensor(prefix, dtype=torch.float32) * mask  # policy tokens of the prefix only
    scale = float(mask.sum()) / float(schema_mask.sum())  # schema term = mean over its own tokens
    a_full = torch.tensor(normalised(full), dtype=torch.float32).clamp(-10, 10)
    a_schema = torch.tensor(normalised(schema), dtype=torch.float32).clamp(-10, 10)
    expected = a_full[:, None] * mask + 0.25 * scale * a_schema[:, None] * schema_mask
    torch.testing.assert_close(data.batch["advantages"], expected, rtol=1e-4, atol=1e-5)
    assert data.batch["advantages"][0, 2] == 0.0  # observation token inside the prefix: no advantage
    assert metrics["sqlagent/schema_track/empty_masks"] == 1.0
    with pytest.raises(Exception, match="schema"):
        T.phase_aware_advantages(as_proto([row("q", "agent", [1], 1.0), row("q", "agent", [1], 0.0)]), settings)


def test_padding_rows_get_zero_and_stay_out_of_groups() -> None:
    rows = [row("u", "agent", [1, 1], r) for r in (1.0, 0.0, 0.5)]
    padded = rows + [row("u", "agent", [0], 1.0)]  # veRL's synthetic row copies a real row's fields
    data, _ = T.phase_aware_advantages(as_proto(padded), T.AdvantageSettings(epsilon=EPS), [False, False, False, True])
    expected = normalised([1.0, 0.0, 0.5])
    np.testing.assert_allclose(data.batch["advantages"][:3, 0].numpy(), expected, rtol=1e-4)
    assert float(data.batch["advantages"][3].abs().sum()) == 0.0


def test_dropped_rows_stay_out_of_their_group() -> None:
    rows = [row("u", "agent", [1, 1], r) for r in (1.0, 0.0, 0.5)]
    dropped = row("u", "agent", [0], 0.0)
    dropped["extra_fields"][T.EPISODE_KEY]["dropped"] = True  # an over-long prompt's placeholder row
    data, metrics = T.phase_aware_advantages(as_proto(rows + [dropped]), T.AdvantageSettings(epsilon=EPS))
    np.testing.assert_allclose(data.batch["advantages"][:3, 0].numpy(), normalised([1.0, 0.0, 0.5]), rtol=1e-4)
    assert float(data.batch["advantages"][3].abs().sum()) == 0.0 and metrics["sqlagent/dropped_rows"] == 1.0


def test_rows_from_another_agent_loop_are_rejected() -> None:
    bad = [{"uid": "u", "response_mask": torch.tensor([1]), "extra_fields": {"turn_scores": []}}] * 2
    with pytest.raises(ValueError, match="sqlagent"):
        T.phase_aware_advantages(as_proto(bad), T.AdvantageSettings())


class FakeTransferQueue:
    """In-memory stand-in for TransferQueue's kv_batch_get / kv_batch_put."""

    def __init__(self, keys: list[str], rows: list[dict[str, Any]]) -> None:
        self.store = dict(zip(keys, rows, strict=True))
        self.written: dict[str, Any] = {}

    def kv_batch_get(self, keys, partition_id, select_fields):
        return list_of_dict_to_tensordict([{f: self.store[k][f] for f in select_fields} for k in keys])

    def kv_batch_put(self, keys, partition_id, fields):
        self.written = {"keys": list(keys), "fields": fields}
        return KVBatchMeta(partition_id=partition_id, keys=list(keys), tags=[{}] * len(keys))


def test_rollout_correction_rejects_off_policy_rows_and_moves_loss_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    """DualSQL's sequence-level masked IS (veRL's Seq-MIS) inside the overridden step.

    Kept as a hand-built trainer: in the fit tier rollouts are on-policy (the server has
    the trainer's weights), so no sequence is ever rejected there."""
    import transfer_queue
    from omegaconf import OmegaConf

    rows, keys = dualsql_rows()
    for i, r in enumerate(rows):
        n = int(r["response_mask"].shape[0])
        r["old_log_probs"] = torch.full((n,), -1.0)
        # row 3 was sampled by a very different policy: its sequence IS ratio is far above 2
        r["rollout_log_probs"] = torch.full((n,), -3.0 if i == 3 else -1.0)
    fake = FakeTransferQueue(keys, rows)
    monkeypatch.setattr(transfer_queue, "kv_batch_get", fake.kv_batch_get)
    monkeypatch.setattr(transfer_queue, "kv_batch_put", fake.kv_batch_put)
    trainer = object.__new__(T.SqlAgentTrainer)
    trainer.config = OmegaConf.create(
        {
            "sqlagent": {
                "agent": {"name": "dualsql"},
                "reward": {"name": "dualsql"},
                "advantage": {"estimator": "grpo", "epsilon": EPS},
            },
            "algorithm": {
                "rollout_correction": {
                    "rollout_is": "sequence",
                    "rollout_is_threshold": 2.0,
                    "rollout_rs": "seq_sum_k1",
                    "rollout_rs_threshold": "0.5_2.0",
                    "bypass_mode": False,
                    "rollout_is_batch_normalize": False,
                }
            },
        }
    )
    metrics: dict[str, float] = {}
    trainer._compute_advantage(KVBatchMeta(partition_id="train", keys=keys, tags=[{}] * 6), metrics)
    written = fake.written["fields"]
    masks = [m.tolist() for m in written["response_mask"].unbind()]
    assert masks[3] == [0] * len(masks[3])  # rejected sequence: no tokens train
    assert masks[0] == rows[0]["response_mask"].tolist()  # on-policy rows are kept
    assert [m.tolist() for m in written["loss_mask"].unbind()] == masks  # loss mask moved with it
    assert float(written["advantages"].unbind()[3].abs().sum()) == 0.0
    assert "rollout_is_weights" in written
    assert any(k.startswith("rollout_corr/") for k in metrics)


def test_eval_record_never_labels_another_metric_as_ex() -> None:
    val = {"val-aux/sqlagent/exec/mean@1": 0.7, "val-core/sqlagent/reward/mean@1": 2.0}
    assert T.eval_record(val, "ex") == {"ex": 0.7, "reward/total": 2.0}
    assert T.eval_record(val, "qatch") == {"exec/qatch": 0.7, "reward/total": 2.0}


def test_a_rerun_with_no_checkpoint_drops_the_step_records_of_the_last_process(tmp_path: Any) -> None:
    """veRL starting at step 0 (no checkpoint to continue from) redoes every step: the step
    records a stopped process wrote go first, so each step is recorded once; its step-0
    records (the config, the evaluation before training) stay."""
    import json

    from training.engines.verl.shared import WorkerSettings

    def write(name: str, rows: list[dict[str, Any]]) -> None:
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))

    write("metrics.jsonl", [{"step": 0, "kind": "config"}, {"step": 0, "kind": "eval_before"}])
    with open(tmp_path / "metrics.jsonl", "a") as out:
        out.write("".join(json.dumps({"step": s, "kind": "train"}) + "\n" for s in (1, 2)))
    write("samples.jsonl", [{"step": 1}, {"step": 1}, {"step": 2}])
    trainer = object.__new__(T.SqlAgentTrainer)
    trainer._settings = WorkerSettings(agent="think2sql", run_dir=str(tmp_path))
    trainer.global_steps = 0
    trainer._drop_records_after_resume()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in rows] == [("config", 0), ("eval_before", 0)]
    assert (tmp_path / "samples.jsonl").read_text() == ""
