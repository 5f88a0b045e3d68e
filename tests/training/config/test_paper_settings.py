"""Each recipe carries its paper's settings (each design's page, designs/<name>/README.md); one
test per place the project used to depart from them pins the paper value and the behaviour it
drives."""

from __future__ import annotations

from typing import Any

import pytest

from tools.errors import ConfigError
from training.algorithm.kl import KLSchedule
from training.config import TrainConfig, apply_laptop_profile, compose_tree


def recipe(name: str, *overrides: str, config: str = "config") -> TrainConfig:
    raw = compose_tree(config, [f"recipe={name}", *overrides])
    raw = {k: v for k, v in raw.items() if k not in ("hydra", "eval", "predictions")}
    return TrainConfig.from_mapping(raw)


def raw_recipe(name: str, *overrides: str) -> dict[str, Any]:
    return compose_tree("config", [f"recipe={name}", *overrides])


# ----------------------------------------------------------------------------- 1. observation caps


@pytest.mark.parametrize("name,cap", [("trustsql", 1024), ("dualsql", None), ("retoolsql", None), ("think2sql", None)])
def test_observation_cap_is_per_design(name: str, cap: int | None) -> None:
    """docs/designs.md "Turn formats": TRUST-SQL 1,024 tokens; DualSQL none (its executor's own
    10-row / 150-character limits, schema queries in full); ReToolSQL its tools' limits."""
    assert recipe(name).rollout.observation_max_tokens == cap


def test_laptop_profile_keeps_a_printed_cpu_cap() -> None:
    cfg, changes = apply_laptop_profile(recipe("dualsql"))
    assert cfg.rollout.observation_max_tokens == 256
    assert changes["rollout.observation_max_tokens"] == (None, 256)


def test_no_cap_reaches_the_rollout_limits_of_training_and_evaluation() -> None:
    """The same value drives the local trainer's limits and eval.run's."""
    from eval.decoding import resolve_decoding, sampling_and_limits
    from eval.settings import EvalSettings

    cfg = recipe("dualsql")
    decoding = resolve_decoding(cfg, EvalSettings(), set(), laptop=False, model_context=None)
    _, limits = sampling_and_limits(decoding)
    assert limits.max_observation_tokens is None
    trust = resolve_decoding(recipe("trustsql"), EvalSettings(), set(), laptop=False, model_context=None)
    assert sampling_and_limits(trust)[1].max_observation_tokens == 1024


# ----------------------------------------------------------------------------- 2. evaluation decoding


def test_think2sql_evaluates_one_sample_at_t07_top_p095_30k_tokens() -> None:
    ev = recipe("think2sql").evaluation
    assert (ev.mode, ev.samples, ev.temperature, ev.top_p, ev.max_new_tokens) == ("sample", 1, 0.7, 0.95, 30000)


def test_retoolsql_self_consistency_is_16_samples_at_t12() -> None:
    ev = recipe("retoolsql").evaluation
    assert (ev.mode, ev.samples, ev.temperature, ev.top_p) == ("greedy", 16, 1.2, 0.95)


def test_trustsql_infers_with_15_turns_greedy_and_votes_at_t08() -> None:
    cfg = recipe("trustsql")
    assert cfg.agent.options["max_turns_inference"] == 15 and cfg.agent.options["max_turns"] == 10
    assert (cfg.evaluation.mode, cfg.evaluation.temperature) == ("greedy", 0.8)


def test_max_tokens_never_exceed_the_model_context_minus_the_prompt() -> None:
    from eval.decoding import resolve_decoding
    from eval.settings import EvalSettings

    d = resolve_decoding(recipe("think2sql"), EvalSettings(), set(), laptop=False, model_context=32768)
    assert (d.mode, d.temperature, d.top_p) == ("sample", 0.7, 0.95)
    assert d.max_context_tokens == 32768  # 15,500 prompt + 30,000 response would not fit
    assert d.max_new_tokens <= d.max_context_tokens - 1


# ----------------------------------------------------------------------------- 3. ReToolSQL batch


def test_retoolsql_batch_is_12_groups_from_12x_candidates() -> None:
    cfg = recipe("retoolsql")
    assert cfg.algorithm.batch_size == 12 and cfg.algorithm.group_size == 16
    assert cfg.algorithm.dynamic_sampling.oversample == 12 and cfg.algorithm.dynamic_sampling.enable
    assert cfg.algorithm.batch_size * cfg.algorithm.group_size == 192  # completions per optimizer step
    assert cfg.algorithm.dynamic_sampling.return_unkept == "varying"


@pytest.mark.parametrize("model", ["gemma4_31b", "gemma4_e4b", "smollm2"])
def test_retoolsql_runs_into_the_beta_0_phase_past_step_100(model: str) -> None:
    """§6.4: beta 0.005 for steps 0-40, 0.001 for 40-80, 0 from 80 on; the E4B run kept
    learning past step 100. Steps count from 0, so the last step is total_steps - 1."""
    cfg = recipe("retoolsql", f"model={model}")
    kl = KLSchedule.from_pairs(cfg.algorithm.kl_schedule)
    assert (kl.beta(0), kl.beta(39), kl.beta(40), kl.beta(79), kl.beta(80)) == (0.005, 0.005, 0.001, 0.001, 0.0)
    total = cfg.trainer.total_steps
    assert total == 120 and total - 1 > 100 and kl.beta(total - 1) == 0.0
    small, _ = apply_laptop_profile(cfg)
    assert small.trainer.total_steps == 2  # the laptop profile keeps the CPU demo short


# ----------------------------------------------------------------------------- 3b. run length by backbone


@pytest.mark.parametrize(
    "overrides,steps",
    [
        (("model=qwen3_4b",), 100),  # App. B: DualSQL-4B
        (("model=qwen3_8b",), 300),  # App. B: DualSQL-8B
        ((), 300),  # model.path null: engine=verl trains gpu_backbone, Qwen3-8B
        (("model=hf", "model.path=/models/Qwen3-4B"), 100),  # a local directory named as the hub model
        (("model=qwen3_4b", "trainer.total_steps=7"), 7),  # the command line wins
    ],
)
def test_dualsql_run_length_follows_the_backbone(overrides: tuple[str, ...], steps: int) -> None:
    cfg = recipe("dualsql", *overrides)
    assert cfg.trainer.total_steps == steps
    assert apply_laptop_profile(cfg)[0].trainer.total_steps == 2


def test_a_backbone_the_table_does_not_list_runs_one_epoch_and_a_bad_entry_is_named() -> None:
    assert recipe("dualsql", "model=hf", "model.path=/models/other").trainer.total_steps is None
    assert recipe("trustsql", "model=qwen3_4b").trainer.total_steps is None  # TRUST-SQL has no such table
    with pytest.raises(ConfigError, match=r"total_steps_by_backbone\['Qwen/Qwen3-4B'\]=0"):
        recipe("dualsql", "trainer.total_steps_by_backbone={Qwen/Qwen3-4B:0}")


# ----------------------------------------------------------------------------- 3c. SFT settings


@pytest.mark.parametrize(
    "name,overrides,lr",
    [
        ("retoolsql", ("model=gemma4_31b",), 1e-5),  # full fine-tuning of 31B: Tulu 2's 70B rate
        ("retoolsql", ("model=gemma4_31b", "model.lora.rank=32"), 1e-4),  # LoRA above 15B: QLoRA's rate
        ("retoolsql", ("model=gemma4_e4b",), 2e-5),  # 7.4B stored
        ("dualsql", ("model=qwen3_8b",), 2e-5),
        ("trustsql", ("model=qwen3_4b", "model.lora.rank=16"), 2e-4),
        ("think2sql", ("model=qwen2_5_coder_7b",), 4e-5),  # the paper's own rate is kept
        ("retoolsql", ("model=gemma4_31b", "supervised.lr=3e-6"), 3e-6),  # the command line wins
    ],
)
def test_sft_learning_rate_is_the_papers_or_scaled_to_the_backbone(
    name: str, overrides: tuple[str, ...], lr: float
) -> None:
    assert recipe(name, "stage=sft", *overrides).supervised.lr == pytest.approx(lr)


def test_the_laptop_keeps_its_own_sft_rate_for_the_135m_model() -> None:
    cfg = recipe("retoolsql", "stage=sft")
    assert cfg.supervised.lr == pytest.approx(2e-5)  # the embedded 135M model, scaled
    small, changes = apply_laptop_profile(cfg)
    assert small.supervised.lr == pytest.approx(1e-4) and changes["supervised.lr"] == (cfg.supervised.lr, 1e-4)
    kept, _ = apply_laptop_profile(recipe("retoolsql", "stage=sft", "supervised.lr=5e-5"), ["supervised.lr"])
    assert kept.supervised.lr == pytest.approx(5e-5)


def test_return_unkept_refuses_an_unknown_mode() -> None:
    with pytest.raises(ConfigError, match="return_unkept='sometimes'"):
        recipe("retoolsql", "algorithm.dynamic_sampling.return_unkept=sometimes")


# ----------------------------------------------------------------------------- 4. TRUST-SQL variants


def test_trustsql_w_schema_and_prefill_are_one_command_line_each() -> None:
    plain = recipe("trustsql", "reward.schema_in_total=0.25", "advantage=grpo")
    assert plain.advantage.estimator == "grpo" and plain.advantage.clamp is None  # plain GRPO
    assert plain.reward.options["schema_in_total"] == 0.25
    prefill = recipe("trustsql", "agent.schema_prefill=true")
    assert prefill.agent.options["schema_prefill"] is True and prefill.advantage.estimator == "two_track"
    paper = recipe("trustsql")
    assert paper.advantage.clamp == 10.0 and paper.advantage.schema_weight == 0.25


def test_laptop_profile_gives_trustsql_the_four_turns_the_phase_order_needs() -> None:
    """Explore, propose and generate come before confirm (agent.enforce_phase_order): four
    turns is the fewest that reach an answer."""
    cfg, _ = apply_laptop_profile(recipe("trustsql"))
    assert cfg.agent.options["enforce_phase_order"] is True
    assert cfg.agent.options["max_turns"] >= 4 and cfg.agent.options["max_turns_inference"] >= 4


def test_laptop_profile_gives_trustsql_one_question_a_step_unless_the_command_line_asks() -> None:
    """TRUST-SQL's long multi-turn episodes: one group of G per laptop step (the recipe's
    laptop.batch_size); the paper's 16 stays for GPU runs and a given value is kept."""
    cfg, changes = apply_laptop_profile(recipe("trustsql"))
    assert (cfg.algorithm.batch_size, cfg.algorithm.group_size) == (1, 4)
    assert changes["algorithm.batch_size"] == (16, 1)
    asked, _ = apply_laptop_profile(recipe("trustsql", "algorithm.batch_size=2"), ["algorithm.batch_size"])
    assert asked.algorithm.batch_size == 2
    assert apply_laptop_profile(recipe("retoolsql"))[0].algorithm.batch_size == 2  # the shared profile's


# ----------------------------------------------------------------------------- 5. Think2SQL loss


def test_think2sql_normalises_per_sequence_on_both_engines() -> None:
    from training.engines.verl.config.translate import verl_config_for

    cfg = recipe("think2sql")
    assert cfg.algorithm.loss_agg_mode == "seq-mean-token-mean"  # paper eq. 5: 1/|o_i| per sample
    assert verl_config_for(cfg).actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"


def test_seq_mean_token_mean_weights_each_sequence_equally() -> None:
    """A short and a long sequence with the same per-token loss contribute equally."""
    import torch

    from training.engines.local import loss as lp

    mask = torch.tensor([[1.0, 0, 0, 0], [1, 1, 1, 1]])  # [2, 4]
    logp = torch.zeros(2, 4, requires_grad=True)
    adv = {"full": torch.tensor([1.0, 1.0])}
    settings = lp.LossSettings(loss_agg_mode="seq-mean-token-mean")
    loss, _ = lp.grpo_loss(logp, logp.detach(), {"full": mask}, adv, lp.track_totals({"full": mask}), settings)
    loss.backward()
    grad = logp.grad.abs()
    assert grad[0, 0].item() == pytest.approx(4 * grad[1, 0].item())  # 1/|o_1| = 1 vs 1/|o_2| = 1/4
    token = lp.LossSettings(loss_agg_mode="token-mean")
    logp2 = torch.zeros(2, 4, requires_grad=True)
    loss2, _ = lp.grpo_loss(logp2, logp2.detach(), {"full": mask}, adv, lp.track_totals({"full": mask}), token)
    loss2.backward()
    assert logp2.grad[0, 0].item() == pytest.approx(logp2.grad[1, 0].item())


# ----------------------------------------------------------------------------- 6. DualSQL IS


def test_dualsql_asks_for_sequence_masked_is_on_both_engines() -> None:
    cfg = recipe("dualsql")
    corr = cfg.algorithm.rollout_correction
    assert (corr.rollout_is, corr.rollout_is_threshold, corr.rollout_rs, corr.rollout_rs_threshold) == (
        "sequence",
        2.0,
        "seq_sum_k1",
        "0.5_2.0",
    )
    from training.engines.verl.config.translate import verl_config_for

    verl_corr = verl_config_for(cfg).algorithm.rollout_correction
    assert (verl_corr.rollout_is, verl_corr.rollout_rs, verl_corr.rollout_rs_threshold) == (
        "sequence",
        "seq_sum_k1",
        "0.5_2.0",
    )
    assert recipe("think2sql").algorithm.rollout_correction.enabled is False  # veRL's default: off


# ----------------------------------------------------------------------------- 7. Spider EX


def test_data_spider_scores_with_spiders_execution_match() -> None:
    cfg = recipe("trustsql", "data=spider")
    assert cfg.data.ex_metric == "spider" and cfg.reward.exec_metric == "spider"
    assert recipe("retoolsql", "data=spider").reward.exec_metric == "spider"
    assert recipe("dualsql", "data=spider").reward.exec_metric == "rex"  # REX is DualSQL's own metric
    assert recipe("trustsql").reward.exec_metric == "ex"


def test_retoolsql_privileged_teacher_draws_pass_at_8_and_the_laptop_caps_it_at_4() -> None:
    """§3.10: the privileged teacher runs greedily and with pass@8 sampling."""
    sup = recipe("retoolsql").supervised
    assert (sup.teacher_greedy, sup.teacher_samples, sup.privileged) == (True, 8, True)
    assert recipe("think2sql").supervised.teacher_samples == 1  # Think2SQL's own setting is kept
    cfg, changes = apply_laptop_profile(recipe("retoolsql", "stage=sft_rl"))
    assert cfg.supervised.teacher_samples == 4 and changes["supervised.teacher_samples"] == (8, 4)
    cfg, changes = apply_laptop_profile(recipe("retoolsql", "stage=sft_rl", "supervised.teacher_samples=2"))
    assert cfg.supervised.teacher_samples == 2 and "supervised.teacher_samples" not in changes


def test_trustsql_sft_keeps_every_verified_trace_and_names_its_trustsql_options() -> None:
    """App. A.2 keeps a trajectory iff it is correct and format-clean (no per-question cap);
    R_format is App. F.2's (no extra conditions); the phase order and the propose phase are on."""
    cfg = recipe("trustsql")
    assert cfg.supervised.max_traces_per_question is None
    assert cfg.reward.options["require_all_actions"] is False
    assert cfg.reward.options["require_clean_feedback"] is False
    assert cfg.agent.options["enforce_phase_order"] is True and cfg.agent.options["propose_phase"] is True
    without = recipe("trustsql", "stage=sft", "agent.propose_phase=false")
    assert without.agent.options["propose_phase"] is False


def test_trustsql_draws_sft_and_rl_questions_from_two_datasets_and_the_laptop_splits_minibird() -> None:
    """App. A.2 / A.3: SFT questions from SynSQL-2.5M (Moderate or harder), RL's from ``data``;
    on the laptop the two stages get disjoint parts of minibird's training split."""
    from eval.data import load_from_config

    cfg = recipe("trustsql", "stage=sft_rl")
    assert cfg.supervised.data == {
        "kind": "synsql",
        "root": None,
        "split": "train",
        "difficulties": ["moderate", "challenging"],
    }
    assert recipe("retoolsql").supervised.data is None  # the other designs: one dataset for both stages
    small, changes = apply_laptop_profile(cfg)
    assert small.supervised.data == {
        "kind": "minibird",
        "root": None,
        "split": "train",
        "limit": 330,
        "difficulties": ["moderate", "challenging"],
    }
    assert small.data.offset == 330 and changes["data.offset"] == (0, 330)
    assert small.supervised.rl_questions == 16  # the filter samples 16 RL questions, k = 4, keeps < 3
    sft = load_from_config(small.supervised.data, "train")
    rl = load_from_config(small.data, "train")
    assert sft and rl and not {ex.id for ex in sft} & {ex.id for ex in rl}
    assert {ex.difficulty for ex in sft} == {"moderate", "challenging"}
    rl_only, _ = apply_laptop_profile(recipe("trustsql"))  # stage=rl: one dataset, nothing split
    assert rl_only.data.offset == 0 and rl_only.supervised.data == cfg.supervised.data
    mine, changes = apply_laptop_profile(
        recipe("trustsql", "stage=sft_rl", "supervised.data.root=/data/SynSQL-2.5M"), ["supervised.data.root"]
    )
    assert mine.supervised.data["root"] == "/data/SynSQL-2.5M" and "supervised.data" not in changes
