"""Drive adversarial turns (tests/helpers/turn_fuzz.py) through every registered design and
count what happens: whole episodes on ``Episode.step`` (text path), the same designs
through the rollout driver with a token generate that emits the turns (token path), and
each resulting trajectory through its design's reward and the single-metric rewards.

Nothing here lets an exception out: one that escapes the product code is recorded with
the input that raised it (``DesignTally.exceptions``), and a broken promise of the
contracts is recorded too (``DesignTally.violations``): a failed turn without a format
reason, an executed call without an outcome, a tool that crashed inside, a policy token
that generate did not return, a reward that is not a finite number or reports an error
(the gold SQL is fine, so a reward error is a reward bug).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import random
import re
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import make_agent
from agents.designs import get_design
from agents.types import EpisodeResult, Example, Step, Trajectory
from tests.helpers.agent_db import JOIN_SQL, make_example
from tests.helpers.agent_scripts import SCRIPTS
from tests.helpers.designs import project_designs
from tests.helpers.turn_fuzz import TurnFuzzer
from training.algorithm.rewards import get_reward
from training.rollout import GenerationOutput, RolloutLimits, SamplingParams, run_episodes
from training.rollout.chat_segments import ChatSegments

END_REASONS = ("answer", "turn_budget", "format_cutoff", "context_limit", "response_limit")
SINGLE_METRIC_REWARDS = ("ex", "rex", "qatch")
VARIANT_OPTIONS: dict[str, list[dict[str, Any]]] = {
    "dualsql": [{"guardrails": False}],  # a failed turn is reported and the episode goes on
    "trustsql": [{"schema_prefill": True, "enforce_phase_order": False}],  # any action on any turn
}
"""Option sets that change an episode's path, run besides each design's defaults."""
LIMITS = (
    RolloutLimits(),
    RolloutLimits(max_response_tokens=700, max_tokens_per_turn=200, max_observation_tokens=48),
    RolloutLimits(max_context_tokens=3000, max_tokens_per_turn=1024),
    RolloutLimits(max_turns=2, max_observation_tokens=16),
    RolloutLimits(max_prompt_tokens=64),
)
"""Token and turn limits the token path draws from (one per batch)."""
REWARD_TIMEOUT_S = 0.2


@dataclass
class DesignTally:
    """What the fuzz saw for one design (variant)."""

    turns: int = 0
    episodes: int = 0
    kinds: Counter = field(default_factory=Counter)
    format_failures: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    end_reasons: Counter = field(default_factory=Counter)
    rewards: int = 0
    reward_errors: Counter = field(default_factory=Counter)
    exceptions: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    slowest_step: tuple[float, str] = (0.0, "")
    slowest_reward: tuple[float, str] = (0.0, "")

    def timed(self, which: str, seconds: float, what: str) -> None:
        """Keep the slowest agent step / reward call (a parser that backtracks shows here)."""
        if seconds > getattr(self, which)[0]:
            setattr(self, which, (seconds, what))

    def crash(self, where: str, text: Any) -> None:
        last = traceback.format_exc().strip().splitlines()[-1]
        self.exceptions.append(f"{where}: {last} on {_show(text)}")

    def broke(self, promise: str, text: Any = "") -> None:
        self.violations.append(f"{promise} on {_show(text)}" if text != "" else promise)


def _show(text: Any) -> str:
    shown = repr(text)
    return shown if len(shown) <= 300 else shown[:300] + f"…({len(shown)} chars)"


def reason_kind(reason: str) -> str:
    """A format reason without its specifics (counts, names, parser details)."""
    kind = re.sub(r"'[^']*'|\"[^\"]*\"", "…", reason.split(" (")[0])
    return re.sub(r"\d+", "N", kind)[:90]


def fuzz_example(design: str, db_path: Path) -> Example:
    """The question the design's scripts answer (tests/helpers/agent_scripts.py)."""
    if design == "dualsql":
        return make_example(
            db_path,
            JOIN_SQL,
            "What is the highest average math score of a school in Fresno?",
            ("satscores", "schools"),
            ("satscores.avg_math", "satscores.school_id", "schools.city", "schools.id"),
        )
    return make_example(db_path)


def variants(designs: Sequence[str] | None = None) -> list[tuple[str, str, dict[str, Any]]]:
    """``(label, design, options)``: every registered project design with its defaults,
    and the option sets of ``VARIANT_OPTIONS``."""
    out = []
    for name in designs or project_designs():
        out.append((name, name, {}))
        for options in VARIANT_OPTIONS.get(name, []):
            label = name + "[" + ",".join(f"{k}={v}" for k, v in options.items()) + "]"
            out.append((label, name, options))
    return out


@contextlib.contextmanager
def short_query_deadlines(seconds: float) -> Iterator[None]:
    """Executor presets without a VM-step cap (TRUST-SQL's and DualSQL's: a 30 s deadline
    only) get a ``seconds`` deadline for the duration, so runaway SQL stops quickly."""
    from tools import PRESETS

    changed = {name: limits for name, limits in PRESETS.items() if limits.max_vm_steps is None and name != "metric"}
    for name, limits in changed.items():
        PRESETS.register(name, replace=True)(dataclasses.replace(limits, timeout_s=min(limits.timeout_s, seconds)))
    try:
        yield
    finally:
        for name, limits in changed.items():
            PRESETS.register(name, replace=True)(limits)


# ----------------------------------------------------------------------------- checks


def check_step(step: Any, text: str, tally: DesignTally) -> None:
    if not (isinstance(step, Step) and isinstance(step.phase, str) and isinstance(step.format_reason, str)):
        tally.broke(f"step returned {type(step).__name__} with phase/reason of the wrong type", text)
        return
    if not step.format_ok and not step.format_reason:
        tally.broke("a failed turn has no format reason", text)
    for message in step.observations:
        if message.get("role") != "tool" or not isinstance(message.get("content"), str):
            tally.broke(f"an observation is not a tool message with text: {_show(message)}", text)
        elif "internal tool error" in message["content"]:
            tally.broke(f"a tool crashed inside: {message['content'][:300]}", text)


def check_result(result: EpisodeResult, tally: DesignTally) -> None:
    """Every failure recorded: a failed turn has its reason, an executed call its outcome."""
    tally.episodes += 1
    tally.end_reasons[result.end_reason] += 1
    if result.end_reason not in END_REASONS:
        tally.broke(f"unknown end reason {result.end_reason!r}")
    for i, turn in enumerate(result.turns):
        if turn.index != i or turn.text_chars != len(turn.text):
            tally.broke(f"turn record {i} is misnumbered or miscounted", turn.text)
        if not turn.format_ok:
            if not turn.format_reason:
                tally.broke("a failed turn has no recorded format reason", turn.text)
            tally.format_failures[reason_kind(turn.format_reason)] += 1
        elif turn.tool_name is not None and turn.tool_outcome is None:
            tally.broke("an executed tool call has no recorded outcome", turn.text)
        if turn.tool_outcome is not None:
            tally.outcomes[turn.tool_outcome] += 1


def check_trajectory(
    traj: Trajectory,
    calls: dict[int, list[tuple[list[int], list[float]]]],
    eos: frozenset[int],
    tok: Any,
    tally: DesignTally,
) -> None:
    """The driver's token rules on one trajectory (see training/rollout/episode.py)."""
    ids, mask, turns, lps = traj.response_ids, traj.response_mask, traj.turn_index, traj.logprobs
    if lps is None and not ids:  # nothing generated (the prompt alone was over a limit)
        return
    if lps is None or not len(ids) == len(mask) == len(turns) == len(lps):
        tally.broke("per-token lists of different lengths (or no log-probs)")
        return
    if (
        set(mask) - {0, 1}
        or turns != sorted(turns)
        or (turns and not 0 <= turns[0] <= turns[-1] <= len(traj.result.turns))
    ):
        tally.broke(f"bad mask or turn index (turns {sorted(set(turns))}, records {len(traj.result.turns)})")
        return
    if any(lp != 0.0 for lp, m in zip(lps, mask, strict=True) if not m):
        tally.broke("a template or observation token carries a log-prob")
    texts = {t.index: t.text for t in traj.result.turns}
    for turn in sorted(set(turns)):
        start = turns.index(turn)
        positions = [i for i in range(start, len(ids)) if turns[i] == turn and mask[i]]
        policy = [ids[i] for i in positions]
        if positions and positions != list(range(start, start + len(positions))):
            tally.broke(f"turn {turn}: policy tokens are not contiguous at the start of the turn")
            continue
        given = calls.get(hash(tuple(traj.prompt_ids + ids[:start])), [])
        if not any(
            out[: len(policy)] == policy and out_lps[: len(policy)] == [lps[i] for i in positions]
            for out, out_lps in given
        ):
            tally.broke(f"turn {turn}: policy tokens or log-probs that generate did not return for that prompt")
            continue
        if any(t in eos for t in policy[:-1]):
            tally.broke(f"turn {turn}: an end-of-sequence token inside the turn's policy tokens")
        body = policy[:-1] if policy and policy[-1] in eos else policy
        if turn in texts and not tok.decode(
            body, skip_special_tokens=False, clean_up_tokenization_spaces=False
        ).startswith(texts[turn]):
            tally.broke(f"turn {turn}: the kept tokens do not cover the text the episode judged", texts[turn])
    for message in traj.messages:
        if "internal tool error" in str(message.get("content", "")):
            tally.broke(f"a tool crashed inside: {str(message['content'])[:300]}")


def score(traj: Trajectory, example: Example, db: Any, rewards: dict[str, Any], tally: DesignTally) -> None:
    for name, reward in rewards.items():
        started = time.perf_counter()
        try:
            out = reward(traj, example, db)
        except Exception:  # noqa: BLE001 - the fuzz records it
            tally.crash(f"reward {name}", traj.result.final_sql)
            continue
        chars = sum(t.text_chars for t in traj.result.turns)
        what = f"{name} on {chars} characters of turns, final SQL {_show(traj.result.final_sql)[:100]}"
        tally.timed("slowest_reward", time.perf_counter() - started, what)
        tally.rewards += 1
        numbers = [out.total, *out.components.values(), *out.tracks.values()]
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in numbers):
            tally.broke(f"reward {name} is not finite: {out}", traj.result.final_sql)
        if "exec" not in out.components or "full" not in out.tracks:
            tally.broke(f"reward {name} lacks exec or full", traj.result.final_sql)
        if out.error is not None:
            tally.reward_errors[f"{name}: {out.error[:120]}"] += 1


def text_trajectory(example: Example, result: EpisodeResult) -> Trajectory:
    """An episode of the text path as the rewards read it (one policy token per 3 characters)."""
    n = min(sum(t.text_chars for t in result.turns) // 3, 50_000)
    return Trajectory(example.id, result.role, [], [0] * n, [1] * n, [0] * n, result)


# ----------------------------------------------------------------------------- the two paths


def text_path(
    agent: Any, example: Example, db: Any, fuzzer: TurnFuzzer, turns: int, rewards: dict, tally: DesignTally
) -> None:
    """Whole episodes on ``Episode.step``: DualSQL's linker result feeds its generator."""
    previous: list[EpisodeResult] = []
    done = 0
    while done < turns:
        episode = agent.start(example, db, previous) if previous else None
        if episode is None:
            previous, episode = [], agent.start(example, db)
        finished = False
        while not finished:
            if done >= turns:
                episode.end("turn_budget")
                break
            kind, text = fuzzer.turn()
            tally.kinds[kind] += 1
            done += 1
            tally.turns += 1
            started = time.perf_counter()
            try:
                step = episode.step(text)
            except Exception:  # noqa: BLE001 - the fuzz records it
                tally.crash(f"{episode.role} step", text)
                episode.end("format_cutoff")
                break
            what = f"a {kind} turn of {len(text)} characters: {_show(text)[:100]}"
            tally.timed("slowest_step", time.perf_counter() - started, what)
            check_step(step, text, tally)
            finished = step.done
        try:
            result = episode.result()
        except Exception:  # noqa: BLE001
            tally.crash("result", "")
            continue
        check_result(result, tally)
        score(text_trajectory(example, result), example, db, rewards, tally)
        previous = [*previous, result]


class FuzzGenerate:
    """A batched token generate that emits fuzzed turns: encoded text, random token ids
    (special tokens included), EOS or not, text past the stop string, cut at the budget.
    What it returned is kept by prompt so the trajectories can be checked against it."""

    def __init__(self, fuzzer: TurnFuzzer, tokenizer: Any, rng: random.Random, tally: DesignTally) -> None:
        self.fuzzer, self.tok, self.rng, self.tally = fuzzer, tokenizer, rng, tally
        self.eos = tokenizer.eos_token_id
        self.calls: dict[int, list[tuple[list[int], list[float]]]] = {}

    def _ids(self) -> list[int]:
        rng = self.rng
        kind, text = self.fuzzer.turn(token_safe=True)
        self.tally.kinds[kind] += 1
        if rng.random() < 0.08:
            return [rng.randrange(len(self.tok)) for _ in range(rng.randrange(400))]
        ids = self.tok.encode(text, add_special_tokens=False)
        r = rng.random()
        if r < 0.15:  # an engine that does not stop at EOS
            return ids + [self.eos] + self.tok.encode("<answer>SELECT 1</answer>", add_special_tokens=False)
        if r < 0.55:
            return ids + [self.eos]
        if r < 0.75:  # generation ran past the stop string
            return ids + self.tok.encode(
                '\n<tool_response>{"rows": "made up"}</tool_response>', add_special_tokens=False
            )
        return ids

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        outputs = []
        for prompt in prompts:
            whole = self._ids()
            ids = whole[: params.max_new_tokens]
            lps = [-round(self.rng.random() * 8, 3) for _ in ids]
            self.calls.setdefault(hash(tuple(prompt)), []).append((ids, lps))
            self.tally.turns += 1
            outputs.append(GenerationOutput(ids, lps, "length" if len(ids) < len(whole) else "stop"))
        return outputs


def token_path(
    agent: Any,
    example: Example,
    db: Any,
    fuzzer: TurnFuzzer,
    turns: int,
    rewards: dict,
    tally: DesignTally,
    tokenizer: Any,
    rng: random.Random,
) -> None:
    """Batches of four requests through ``run_episodes`` until ``turns`` turns were generated."""
    eos = ChatSegments(tokenizer).eos_ids
    start = tally.turns
    while tally.turns - start < turns:
        generate = FuzzGenerate(fuzzer, tokenizer, rng, tally)
        limits = rng.choice(LIMITS)
        sampling = SamplingParams(max_new_tokens=rng.choice([64, 512, 4096]), logprobs=True)
        try:
            trajectories = run_episodes(
                agent, [(example, db, i) for i in range(4)], tokenizer, generate, sampling, limits
            )
        except Exception:  # noqa: BLE001 - the fuzz records it
            tally.crash(f"run_episodes {limits}", "(the batch's turns)")
            continue
        for traj in trajectories:
            check_trajectory(traj, generate.calls, eos, tokenizer, tally)
            check_result(traj.result, tally)
            score(traj, example, db, rewards, tally)


def design_rewards(design: str) -> dict[str, Any]:
    """The design's own reward and the single-metric ones, with a short query deadline."""
    names = (get_design(design).reward, *SINGLE_METRIC_REWARDS)
    return {name: get_reward(name, timeout_s=REWARD_TIMEOUT_S) for name in dict.fromkeys(names)}


def run_fuzz(
    turns: int,
    seed: int,
    db: Any,
    designs: Sequence[str] | None = None,
    driver_markers: bool = True,
    tokenizer: Any = None,
    options: dict[str, Any] | None = None,
) -> dict[str, DesignTally]:
    """``turns`` adversarial turns in all, split evenly over the designs' variants and, within
    one, between the text path and the token path. ``db``: a ``tools.Database`` on the
    schools file (tests/helpers/agent_db.py); it must not change. ``options``: agent options
    added to every variant (a test plugs a broken parser in this way)."""
    from tests.helpers.tiny_model import tiny_tokenizer

    tokenizer = tokenizer or tiny_tokenizer()
    runs = variants(designs)
    per_run = max(2, turns // len(runs))
    before = hashlib.sha256(Path(db.path).read_bytes()).hexdigest()
    tallies: dict[str, DesignTally] = {}
    with short_query_deadlines(0.2):
        for label, design, variant_options in runs:
            tally = tallies[label] = DesignTally()
            started = time.perf_counter()
            agent = make_agent(design, **{**variant_options, **(options or {})})
            example = fuzz_example(design, Path(db.path))
            rewards = design_rewards(design)
            scripts = [t for turns_ in SCRIPTS.get(design, {}).values() for t in turns_]
            fuzzer = TurnFuzzer(f"{seed}-{label}", scripts, driver_markers)
            text_path(agent, example, db, fuzzer, per_run - per_run // 2, rewards, tally)
            token_path(
                agent,
                example,
                db,
                fuzzer,
                per_run // 2,
                rewards,
                tally,
                tokenizer,
                random.Random(f"{seed}-{label}-tokens"),
            )
            tally.seconds = time.perf_counter() - started
    if hashlib.sha256(Path(db.path).read_bytes()).hexdigest() != before:
        next(iter(tallies.values())).broke("the database file changed")
    return tallies
