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

    nice -n 10 python benchmarks/learning_curve.py --steps 30          # think2sql, ~35 min on 2 cores
    python benchmarks/learning_curve.py --recipe trustsql --steps 10 --eval-limit 32
    python benchmarks/learning_curve.py --steps 2 --eval-limit 4 --out /tmp/lc   # a smoke run

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
    """Greedy EX per held-out question (1/0), in the trainer's eval-example order."""
    from rex import ExecScorer
    from tools import get_database
    from tools import get_database as db_of
    from training.generation.hf import hf_generate
    from training.rollout import run_episodes

    start = time.perf_counter()
    # the trainer's generation weights, in chunks of 32 rows (fewer, fuller decode batches on CPU)
    generate = hf_generate(trainer.gen_model, trainer.tokenizer, trainer.device, None, chunk=32)
    requests = [(ex, db_of(ex.db_path), 0) for ex in trainer.eval_examples]
    trajectories = run_episodes(
        trainer.eval_agent, requests, trainer.tokenizer, generate, trainer.eval_sampling, trainer.limits
    )
    final = {t.example_id: t.result.final_sql for t in trajectories}
    scorer = ExecScorer()
    matches, executable = [], []
    for ex in trainer.eval_examples:
        score = scorer.score(get_database(ex.db_path), ex.gold_sql, final.get(ex.id), "ex")
        matches.append(int(score.ex_match))
        executable.append(int(score.pred_executed))
    return {
        "ids": [ex.id for ex in trainer.eval_examples],
        "match": matches,
        "executable": executable,
        "ex": float(np.mean(matches)) if matches else 0.0,
        "seconds": time.perf_counter() - start,
    }


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


def verdict(name: str, mean: float, low: float, high: float) -> str:
    sig = low > 0 or high < 0
    word = (
        ("significant: GRPO above control" if low > 0 else "significant: GRPO below control")
        if sig
        else "NOT significant (the 95 % CI contains 0)"
    )
    return f"{name}: GRPO - control = {mean:+.4f}, 95 % CI [{low:+.4f}, {high:+.4f}] -> {word}"


class RewardRecorder:
    """Wraps the trainer's reward function and keeps (question id, total) of each call,
    so the two arms' rewards can be paired per question."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seen = inner, []

    def __call__(self, trajectory: Any, example: Any, db: Any) -> Any:
        reward = self.inner(trajectory, example, db)
        self.seen.append((example.id, float(reward.total)))
        return reward

    def take(self) -> list[tuple[str, float]]:
        seen, self.seen = self.seen, []
        return seen


# ----------------------------------------------------------------------------- stages


def warm_start(args: argparse.Namespace, overrides: list[str], say: Any) -> tuple[Path, dict[str, Any]]:
    """Train (or reuse) the shared warm start; return its directory and its held-out EX."""
    from training.engines.local.trainer import LocalTrainer
    from training.engines.local.warm_start import DONE, warm_start_dir

    run_dir = Path(args.out) / "warm"
    cfg, profile = make_config(args.recipe, str(run_dir), [*overrides, "seed=0"])
    say(profile)
    trainer = LocalTrainer(cfg, say=say)
    result = trainer.run_warm_start()  # SFT (or the finished one reloaded), generation copy refreshed
    directory = warm_start_dir(run_dir)
    assert (directory / DONE).exists()
    cache = run_dir / "held_out.json"
    digest = weights_digest(trainer.model)
    if (
        cache.exists()
        and json.loads(cache.read_text()).get("digest") == digest
        and len(json.loads(cache.read_text())["match"]) == len(trainer.eval_examples)
    ):
        ev = json.loads(cache.read_text())
    else:
        say(f"[warm] greedy EX on {len(trainer.eval_examples)} held-out questions ...")
        ev = dict(held_out(trainer), digest=digest)
        cache.write_text(json.dumps(ev))
    say(
        f"[warm] SFT NLL {result.get('nll_first', float('nan')):.3f} -> {result.get('nll_last', float('nan')):.3f}; "
        f"held-out EX {ev['ex']:.3f} on {len(ev['match'])} questions"
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
        for example_id, total in recorder.take():
            per_question.setdefault(example_id, []).append(total)
        steps.append(
            {
                "step": trainer.step,
                "reward": metrics.get("reward/total", 0.0),
                "per_question": per_question,
                "ex_batch": metrics.get("ex/batch", 0.0),
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
    say(f"[{name}] held-out EX {after['ex']:.3f}")
    return arm, after


# ----------------------------------------------------------------------------- report


def summarise(
    args: argparse.Namespace, warm_ev: dict[str, Any], arms: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    last = min(args.last, args.steps)
    ex_diff = [g - c for g, c in zip(after["grpo"]["match"], after["control"]["match"], strict=True)]
    reward_diff = []
    for sg, sc in zip(arms["grpo"]["steps"][-last:], arms["control"]["steps"][-last:], strict=True):
        for qid, values in sg["per_question"].items():
            if qid in sc["per_question"]:
                reward_diff.append(float(np.mean(values)) - float(np.mean(sc["per_question"][qid])))
    ex_ci = bootstrap_ci(ex_diff, seed=args.seed)
    reward_ci = bootstrap_ci(reward_diff, seed=args.seed)
    rewards = {a: [s["reward"] for s in arms[a]["steps"]] for a in arms}
    return {
        "recipe": args.recipe,
        "steps": args.steps,
        "seed": args.seed,
        "last_steps": last,
        "held_out_questions": len(warm_ev["match"]),
        "ex_warm_start": warm_ev["ex"],
        "ex_after": {a: after[a]["ex"] for a in after},
        "executable_after": {a: float(np.mean(after[a]["executable"])) for a in after},
        "reward_per_step": rewards,
        "reward_last_mean": {a: float(np.mean(r[-last:])) for a, r in rewards.items()},
        "ex_diff": dict(zip(("mean", "low", "high"), ex_ci, strict=True)),
        "reward_diff": dict(zip(("mean", "low", "high"), reward_ci, strict=True)),
        "grpo_weights_moved": arms["grpo"]["moved"],
        "control_weights_moved": arms["control"]["moved"],
        "zero_variance_groups": {a: [s["zero_variance_groups"] for s in arms[a]["steps"]] for a in arms},
        "grad_norm": {a: [s["grad_norm"] for s in arms[a]["steps"]] for a in arms},
        "seconds_per_step": {a: float(np.mean([s["seconds"] for s in arms[a]["steps"]])) for a in arms},
        "verdict_ex": verdict("held-out EX", *ex_ci),
        "verdict_reward": verdict(f"training reward, last {last} steps", *reward_ci),
    }


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [2, 1]})
    for arm, color in (("grpo", "tab:blue"), ("control", "tab:gray")):
        r = np.asarray(summary["reward_per_step"][arm])
        x = np.arange(1, r.size + 1)
        label = arm + (" (lr = 0)" if arm == "control" else "")
        left.plot(
            x,
            r,
            color=color,
            alpha=0.4 if r.size > 5 else 1.0,
            lw=1,
            marker="o",
            ms=3,
            label=None if r.size > 5 else label,
        )
        if r.size > 5:  # a 5-step moving mean over the noisy per-step rewards
            smooth = np.convolve(r, np.ones(5) / 5, mode="valid")
            left.plot(np.arange(5, r.size + 1), smooth, color=color, lw=2, label=f"{label}, 5-step mean")
    left.set_xlabel("GRPO step")
    left.set_ylabel("mean training reward")
    left.set_title(f"{summary['recipe']}: training reward per step")
    left.legend()
    labels = ["warm start", "GRPO after", "control after"]
    values = [summary["ex_warm_start"], summary["ex_after"]["grpo"], summary["ex_after"]["control"]]
    right.bar(labels, [100 * v for v in values], color=["tab:green", "tab:blue", "tab:gray"])
    d = summary["ex_diff"]
    right.set_title(
        f"held-out EX, {summary['held_out_questions']} questions\n"
        f"GRPO - control {100 * d['mean']:+.1f} pt [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"
    )
    right.set_ylabel("EX (%)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both arms (key=value)")
    args = parser.parse_args(argv)
    say = lambda line: print(line, flush=True)  # noqa: E731
    overrides = [*args.overrides, f"data.eval_limit={'null' if args.eval_limit is None else args.eval_limit}"]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    warm_dir, warm_ev = warm_start(args, overrides, say)
    arms: dict[str, dict[str, Any]] = {}
    after: dict[str, dict[str, Any]] = {}
    for name in ("grpo", "control"):
        arms[name], after[name] = arm_result(args, overrides, warm_dir, warm_ev, name, say)
    summary = summarise(args, warm_ev, arms, after)
    summary["wall_seconds"] = time.perf_counter() - started
    out = Path(args.out)
    (out / "learning_curve.json").write_text(json.dumps(summary, indent=2))
    plot(summary, out / "learning_curve.png")
    say(
        f"\nEX warm start {summary['ex_warm_start']:.3f}; after {args.steps} steps: GRPO "
        f"{summary['ex_after']['grpo']:.3f}, control {summary['ex_after']['control']:.3f} "
        f"({summary['held_out_questions']} held-out questions)"
    )
    say(
        f"mean training reward, last {summary['last_steps']} steps: GRPO {summary['reward_last_mean']['grpo']:.3f}, "
        f"control {summary['reward_last_mean']['control']:.3f}"
    )
    say(summary["verdict_ex"])
    say(summary["verdict_reward"])
    say(
        f"wrote {out / 'learning_curve.json'} and {out / 'learning_curve.png'} ({summary['wall_seconds'] / 60:.1f} min)"
    )
    return summary


if __name__ == "__main__":
    main()
