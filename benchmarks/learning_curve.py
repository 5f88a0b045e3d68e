"""Does GRPO itself learn? A GRPO arm against an lr = 0 control, from one shared warm start.

Protocol (fixed before running; the numbers are whatever comes out):
1. One SFT warm start on demonstrations (the laptop profile's, seed 0), trained once and
   shared by both arms (``<out>/warm/warm_start``; a finished one is reused).
2. Held-out EX of the warm start: greedy, on *every* question of the held-out split
   (minibird dev unless overridden) - the "before" of both arms.
3. Two arms from those weights, for N GRPO steps each on the same seeds (same questions per
   step, same sampling seed at the start): ``grpo`` (the recipe's laptop lr) and
   ``control`` (lr = 0: rollouts, rewards and the update pass run, the weights cannot
   move). The control shows how much the training reward moves by question order and
   sampling noise alone.
4. Main metrics: (a) held-out EX after N steps, GRPO minus control, with a paired bootstrap
   95 % CI over questions; (b) mean training reward over the last ``--last`` steps, GRPO
   minus control, with a paired bootstrap CI over (step, question) pairs (both arms draw
   the same questions at each step). A CI containing 0 is reported as "not significant".

The control's weights are checked to be bit-identical to the warm start after training;
then its held-out EX is the warm start's (greedy decoding is deterministic), and the
script reuses that evaluation instead of repeating it (it re-evaluates if they differ).

Every held-out evaluation also reports EX on the test suite (``rex.test_suite``: the match
confirmed on every neighbour database; one suite per database, chosen for its training and
held-out gold queries, built before the warm start) and how many EX matches the suite
rejects; each arm records the suspect-positive rate of its training rewards (positive
execution rewards carrying a reward-trust flag, pooled over the steps). Reward arms are
runs with overrides (``reward.exec_metric=ex``, ``reward.exec_metric=test_suite``) that
share one warm start (``--warm DIR``); ``--no-control`` runs the GRPO arm alone and
compares its held-out EX with the warm start's.

    nice -n 10 python benchmarks/learning_curve.py --steps 30          # think2sql, ~35 min on 2 cores
    python benchmarks/learning_curve.py --recipe trustsql --steps 10 --eval-limit 32
    python benchmarks/learning_curve.py --steps 2 --eval-limit 4 --out /tmp/lc   # a smoke run
    # three reward arms from one warm start, GRPO only
    python benchmarks/learning_curve.py --steps 10 --no-control --warm runs/lc/warm --out runs/lc/qatch
    python benchmarks/learning_curve.py --steps 10 --no-control --warm runs/lc/warm --out runs/lc/ex \
        reward.exec_metric=ex
    python benchmarks/learning_curve.py --steps 10 --no-control --warm runs/lc/warm --out runs/lc/suite \
        reward.exec_metric=test_suite

Writes ``<out>/learning_curve.json`` and ``<out>/learning_curve.png``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root


def make_config(recipe: str, run_dir: str, overrides: Sequence[str]) -> Any:
    """The recipe with the CPU laptop profile, as ``training.run`` would prepare it."""
    from training.config import compose_tree
    from training.run import prepare_config

    base = [f"recipe={recipe}", "engine=local", "logger=[]", f"run_dir={run_dir}", *overrides]
    raw = compose_tree("config", base)
    explicit = {o.split("=", 1)[0].lstrip("+~") for o in base}
    lines: list[str] = []
    cfg = prepare_config(raw, explicit, say=lines.append)
    return cfg, "\n".join(lines)


def weights_digest(model: Any) -> str:
    """A SHA-256 over every parameter's bytes (bit-identical weights <=> same digest)."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def held_out(trainer: Any) -> dict[str, Any]:
    """Greedy EX per held-out question (1/0), in the trainer's eval-example order, and the
    same on the test suite (``suite``: the EX match confirmed on every neighbour database,
    ``rex.test_suite``; the suites are built or found cached first, chosen for the held-out
    gold queries, and the neighbours only run after a match on the original)."""
    from rex.test_suite import ensure_suites
    from tools import get_database as db_of
    from training.generation.hf import hf_generate
    from training.rollout import run_episodes

    start = time.perf_counter()
    ensure_suites((ex.db_path, ex.gold_sql) for ex in trainer.eval_examples)
    # the trainer's generation weights, in chunks of 32 rows (fewer, fuller decode batches on CPU)
    generate = hf_generate(trainer.gen_model, trainer.tokenizer, trainer.device, None, chunk=32)
    requests = [(ex, db_of(ex.db_path), 0) for ex in trainer.eval_examples]
    trajectories = run_episodes(
        trainer.eval_agent, requests, trainer.tokenizer, generate, trainer.eval_sampling, trainer.limits
    )
    final = {t.example_id: t.result.final_sql for t in trajectories}
    return dict(score_held_out(trainer.eval_examples, final), seconds=time.perf_counter() - start)


def score_held_out(examples: Sequence[Any], final: dict[str, str | None]) -> dict[str, Any]:
    """EX (``match``) and EX on the test suite (``suite``) of each example's final SQL
    (``final``: by example id; None or absent: no answer), in the examples' order."""
    from rex import ExecScorer
    from tools import get_database

    scorer = ExecScorer()
    matches, suite, executable = [], [], []
    for ex in examples:
        score = scorer.score(get_database(ex.db_path), ex.gold_sql, final.get(ex.id), "test_suite")
        matches.append(int(score.ex_match))
        suite.append(int(score.ex_match and score.score == 1.0))
        executable.append(int(score.pred_executed))
    return {
        "ids": [ex.id for ex in examples],
        "match": matches,
        "suite": suite,
        "executable": executable,
        "ex": float(np.mean(matches)) if matches else 0.0,
        "ex_test_suite": float(np.mean(suite)) if suite else 0.0,
        "suite_rejected": suite_rejected({"match": matches, "suite": suite}),
    }


def suite_rejected(ev: dict[str, Any]) -> int:
    """How many held-out EX matches the test suite rejects.

    >>> suite_rejected({"match": [1, 1, 0, 1], "suite": [1, 0, 0, 0]})
    2
    """
    return sum(m and not s for m, s in zip(ev["match"], ev["suite"], strict=True))


def bootstrap_ci(diffs: Sequence[float], reps: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of paired differences and its percentile bootstrap 95 % CI.

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0, 1.0)
    """
    d = np.asarray(diffs, dtype=float)
    if d.size == 0:
        return 0.0, 0.0, 0.0
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(reps, d.size))].mean(axis=1)
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def verdict(name: str, mean: float, low: float, high: float, against: str = "control") -> str:
    sig = low > 0 or high < 0
    word = (
        (f"significant: GRPO above {against}" if low > 0 else f"significant: GRPO below {against}")
        if sig
        else "NOT significant (the 95 % CI contains 0)"
    )
    return f"{name}: GRPO - {against} = {mean:+.4f}, 95 % CI [{low:+.4f}, {high:+.4f}] -> {word}"


class RewardRecorder:
    """Wraps the trainer's reward function and keeps (question id, total) of each call,
    so the two arms' rewards can be paired per question; and counts the positive execution
    rewards (``exec`` > 0) and those of them with a reward-trust flag (``rex.trust``), the
    two sides of ``reward/suspect_positive_rate``."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seen = inner, []
        self.positives = self.flagged = 0

    def __call__(self, trajectory: Any, example: Any, db: Any) -> Any:
        reward = self.inner(trajectory, example, db)
        self.seen.append((example.id, float(reward.total)))
        if reward.components.get("exec", 0.0) > 0:
            self.positives += 1
            self.flagged += int(bool(reward.flags))
        return reward

    def take(self) -> list[tuple[str, float]]:
        seen, self.seen = self.seen, []
        return seen

    def take_trust(self) -> tuple[int, int]:
        """(positive execution rewards, flagged ones) since the last call."""
        counts = (self.positives, self.flagged)
        self.positives = self.flagged = 0
        return counts


# ----------------------------------------------------------------------------- stages


def warm_start(args: argparse.Namespace, overrides: list[str], say: Any) -> tuple[Path, dict[str, Any]]:
    """Train (or reuse) the shared warm start; return its directory and its held-out EX."""
    from training.engines.local.trainer import LocalTrainer
    from training.engines.local.warm_start import DONE, warm_start_dir

    run_dir = Path(args.warm) if args.warm else Path(args.out) / "warm"
    cfg, profile = make_config(args.recipe, str(run_dir), [*overrides, "seed=0"])
    say(profile)
    trainer = LocalTrainer(cfg, say=say)
    from rex.test_suite import ensure_suites

    # one suite per database, chosen for its training and held-out gold queries, for every arm
    built, cached = ensure_suites((ex.db_path, ex.gold_sql) for ex in [*trainer.train_examples, *trainer.eval_examples])
    say(f"[warm] test suites: {built} built, {cached} cached")
    result = trainer.run_warm_start()  # SFT (or the finished one reloaded), generation copy refreshed
    directory = warm_start_dir(run_dir)
    assert (directory / DONE).exists()
    cache = run_dir / "held_out.json"
    digest = weights_digest(trainer.model)
    if (
        cache.exists()
        and json.loads(cache.read_text()).get("digest") == digest
        and json.loads(cache.read_text()).get("ids") == [ex.id for ex in trainer.eval_examples]
        and "suite" in json.loads(cache.read_text())  # made before the test-suite column: evaluate again
    ):
        ev = json.loads(cache.read_text())
    else:
        say(f"[warm] greedy EX on {len(trainer.eval_examples)} held-out questions ...")
        ev = dict(held_out(trainer), digest=digest)
        cache.write_text(json.dumps(ev))
    say(
        f"[warm] SFT NLL {result.get('nll_first', float('nan')):.3f} -> {result.get('nll_last', float('nan')):.3f}; "
        f"held-out EX {ev['ex']:.3f} on {len(ev['match'])} questions, on the test suite {ev['ex_test_suite']:.3f} "
        f"({ev['suite_rejected']} EX matches rejected by the suite)"
    )
    return directory, ev


def run_arm(
    args: argparse.Namespace, overrides: list[str], warm_dir: Path, seed: int, lr_zero: bool, say: Any
) -> dict[str, Any]:
    """N GRPO steps from the warm start; the control zeroes the learning rate."""
    from training.engines.local.trainer import LocalTrainer

    arm = "control" if lr_zero else "grpo"
    run_dir = Path(args.out) / f"{arm}-seed{seed}"
    cfg, _ = make_config(
        args.recipe,
        str(run_dir),
        [
            *overrides,
            f"seed={seed}",
            f"model.path={warm_dir}",
            "stage.warm_start.enable=false",
            f"trainer.total_steps={args.steps}",
            "trainer.eval_before_after=false",
        ],
    )
    trainer = LocalTrainer(cfg, say=lambda _: None)
    if lr_zero:  # the config refuses lr = 0 (a typo there); the control sets it on the optimizer
        for group in trainer.optimizer.param_groups:
            group["lr"] = 0.0
        trainer.scheduler.base_lrs = [0.0] * len(trainer.scheduler.base_lrs)
        if args.control_skips_update:  # with lr = 0 the update cannot move a weight: skip its compute
            trainer.update = lambda buffer, beta: {"update/skipped_lr0": 1.0}
    recorder = RewardRecorder(trainer.reward_fn)
    trainer.reward_fn = recorder
    start_digest = weights_digest(trainer.model)
    steps: list[dict[str, Any]] = []
    for _ in range(args.steps):
        metrics = trainer.train_step()
        per_question: dict[str, list[float]] = {}
        positives, flagged = recorder.take_trust()
        for example_id, total in recorder.take():
            per_question.setdefault(example_id, []).append(total)
        steps.append(
            {
                "step": trainer.step,
                "reward": metrics.get("reward/total", 0.0),
                "per_question": per_question,
                "ex_batch": metrics.get("ex/batch", 0.0),
                "suspect_positive_rate": metrics.get("reward/suspect_positive_rate", 0.0),
                "exec_positive": positives,
                "exec_positive_flagged": flagged,
                "lr": metrics.get("lr", 0.0),
                "grad_norm": metrics.get("policy/grad_norm"),
                "groups_kept": metrics.get("sampling/groups_kept"),
                "zero_variance_groups": metrics.get("sampling/zero_variance_groups"),
                "seconds": metrics.get("time/step", 0.0),
            }
        )
        say(
            f"[{arm} seed {seed}] step {trainer.step}/{args.steps}: reward {steps[-1]['reward']:.3f} "
            f"(batch EX {steps[-1]['ex_batch']:.2f}, {steps[-1]['zero_variance_groups']} zero-variance groups, "
            f"{steps[-1]['seconds']:.0f}s)"
        )
    digest = weights_digest(trainer.model)
    return {
        "arm": arm,
        "seed": seed,
        "steps": steps,
        "trainer": trainer,
        "digest": digest,
        "moved": digest != start_digest,
    }


def arm_result(
    args: argparse.Namespace, overrides: list[str], warm_dir: Path, warm_ev: dict[str, Any], name: str, say: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One arm's steps and held-out EX, saved to ``<out>/<arm>-seed<k>/result.json`` (a rerun
    with the same settings reuses it)."""
    path = Path(args.out) / f"{name}-seed{args.seed}" / "result.json"
    key = {"steps": args.steps, "held_out": warm_ev["ids"], "warm": warm_ev["digest"]}
    if path.exists() and json.loads(path.read_text()).get("key") == key:
        saved = json.loads(path.read_text())
        say(f"[{name}] reusing {path}")
        return saved["arm"], saved["after"]
    arm = run_arm(args, overrides, warm_dir, args.seed, name == "control", say)
    if not arm["moved"] and arm["digest"] == warm_ev["digest"]:
        say(f"[{name}] weights bit-identical to the warm start: held-out EX = the warm start's")
        after = warm_ev
    else:
        say(f"[{name}] greedy EX on {len(warm_ev['match'])} held-out questions ...")
        after = held_out(arm.pop("trainer"))
    arm.pop("trainer", None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "arm": arm, "after": after}))
    say(
        f"[{name}] held-out EX {after['ex']:.3f}, on the test suite {after['ex_test_suite']:.3f} "
        f"({after['suite_rejected']} EX matches rejected by the suite)"
    )
    return arm, after


# ----------------------------------------------------------------------------- report


def summarise(
    args: argparse.Namespace, warm_ev: dict[str, Any], arms: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The figures of the run. Without a control arm (``--no-control``) held-out EX is
    compared with the warm start's (what the control's would be: its weights stay
    bit-identical) and the training reward has no paired comparison."""
    last = min(args.last, args.steps)
    base = after.get("control", warm_ev)
    ex_ci = bootstrap_ci([g - c for g, c in zip(after["grpo"]["match"], base["match"], strict=True)], seed=args.seed)
    rewards = {a: [s["reward"] for s in arms[a]["steps"]] for a in arms}
    summary: dict[str, Any] = {
        "recipe": args.recipe,
        "overrides": args.overrides,
        "steps": args.steps,
        "seed": args.seed,
        "last_steps": last,
        "held_out_questions": len(warm_ev["match"]),
        "ex_warm_start": warm_ev["ex"],
        "ex_test_suite_warm_start": warm_ev["ex_test_suite"],
        "suite_rejected_warm_start": warm_ev["suite_rejected"],
        "ex_after": {a: after[a]["ex"] for a in after},
        "ex_test_suite_after": {a: after[a]["ex_test_suite"] for a in after},
        "suite_rejected_after": {a: after[a]["suite_rejected"] for a in after},
        "executable_after": {a: float(np.mean(after[a]["executable"])) for a in after},
        "reward_per_step": rewards,
        "reward_last_mean": {a: float(np.mean(r[-last:])) for a, r in rewards.items()},
        "suspect_positive_rate_per_step": {a: [s["suspect_positive_rate"] for s in arms[a]["steps"]] for a in arms},
        "suspect_positive_rate": {a: pooled_suspect_rate(arms[a]["steps"]) for a in arms},
        "exec_positive": {a: sum(s["exec_positive"] for s in arms[a]["steps"]) for a in arms},
        "ex_diff": dict(zip(("mean", "low", "high"), ex_ci, strict=True)),
        "ex_diff_against": "control" if "control" in after else "warm start",
        "no_control": "control" not in arms,
        "grpo_weights_moved": arms["grpo"]["moved"],
        "zero_variance_groups": {a: [s["zero_variance_groups"] for s in arms[a]["steps"]] for a in arms},
        "grad_norm": {a: [s["grad_norm"] for s in arms[a]["steps"]] for a in arms},
        "seconds_per_step": {a: float(np.mean([s["seconds"] for s in arms[a]["steps"]])) for a in arms},
        "verdict_ex": verdict("held-out EX", *ex_ci, against="control" if "control" in after else "warm start"),
    }
    if "control" in arms:
        reward_diff = []
        for sg, sc in zip(arms["grpo"]["steps"][-last:], arms["control"]["steps"][-last:], strict=True):
            for qid, values in sg["per_question"].items():
                if qid in sc["per_question"]:
                    reward_diff.append(float(np.mean(values)) - float(np.mean(sc["per_question"][qid])))
        reward_ci = bootstrap_ci(reward_diff, seed=args.seed)
        summary["control_weights_moved"] = arms["control"]["moved"]
        summary["reward_diff"] = dict(zip(("mean", "low", "high"), reward_ci, strict=True))
        summary["verdict_reward"] = verdict(f"training reward, last {last} steps", *reward_ci)
    return summary


def pooled_suspect_rate(steps: Sequence[dict[str, Any]]) -> float:
    """Flagged positive execution rewards over all positive ones, pooled over the steps.

    >>> pooled_suspect_rate([{"exec_positive": 4, "exec_positive_flagged": 1}, {"exec_positive": 0}])
    0.25
    """
    positives = sum(s["exec_positive"] for s in steps)
    return sum(s.get("exec_positive_flagged", 0) for s in steps) / positives if positives else 0.0


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="think2sql")
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps per arm")
    parser.add_argument("--last", type=int, default=10, help="steps averaged for the training-reward metric")
    parser.add_argument("--seed", type=int, default=0, help="seed of both arms (questions, sampling)")
    parser.add_argument("--eval-limit", type=int, default=None, help="held-out questions (default: all of the split)")
    parser.add_argument("--out", default="runs/learning_curve")
    parser.add_argument(
        "--control-skips-update",
        action="store_true",
        help="the lr = 0 arm skips the (weight-neutral) update pass to save time; its rollouts, "
        "rewards and weights are the same as with the pass (the weights are checked)",
    )
    parser.add_argument(
        "--warm",
        default=None,
        help="the warm start's run directory (default <out>/warm): several runs with different "
        "overrides (reward.exec_metric=...) share one warm start this way",
    )
    parser.add_argument(
        "--no-control",
        action="store_true",
        help="run the GRPO arm only; held-out EX is compared with the warm start's (the control's "
        "weights stay bit-identical to it), the training reward has no paired comparison",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both arms (key=value)")
    args = parser.parse_args(argv)
    say = lambda line: print(line, flush=True)  # noqa: E731
    overrides = [*args.overrides, f"data.eval_limit={'null' if args.eval_limit is None else args.eval_limit}"]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    warm_dir, warm_ev = warm_start(args, overrides, say)
    arms: dict[str, dict[str, Any]] = {}
    after: dict[str, dict[str, Any]] = {}
    for name in ("grpo",) if args.no_control else ("grpo", "control"):
        arms[name], after[name] = arm_result(args, overrides, warm_dir, warm_ev, name, say)
    summary = summarise(args, warm_ev, arms, after)
    summary["wall_seconds"] = time.perf_counter() - started
    out = Path(args.out)
    (out / "learning_curve.json").write_text(json.dumps(summary, indent=2))
    from benchmarks.learning_curve_plot import plot

    plot(summary, out / "learning_curve.png")
    say(
        f"\nheld-out EX (on the test suite) of {summary['held_out_questions']} questions: warm start "
        f"{summary['ex_warm_start']:.3f} ({summary['ex_test_suite_warm_start']:.3f}); after {args.steps} steps: "
        + ", ".join(
            f"{a} {summary['ex_after'][a]:.3f} ({summary['ex_test_suite_after'][a]:.3f}, "
            f"{summary['suite_rejected_after'][a]} EX matches rejected by the suite)"
            for a in summary["ex_after"]
        )
    )
    say(
        f"mean training reward, last {summary['last_steps']} steps: "
        + ", ".join(f"{a} {v:.3f}" for a, v in summary["reward_last_mean"].items())
    )
    say(
        "suspect-positive rate over training: "
        + ", ".join(
            f"{a} {v:.3f} of {summary['exec_positive'][a]} positive execution rewards"
            for a, v in summary["suspect_positive_rate"].items()
        )
    )
    say(summary["verdict_ex"])
    if "verdict_reward" in summary:
        say(summary["verdict_reward"])
    say(
        f"wrote {out / 'learning_curve.json'} and {out / 'learning_curve.png'} ({summary['wall_seconds'] / 60:.1f} min)"
    )
    return summary


if __name__ == "__main__":
    main()
