"""One veRL agent loop that runs any of the project's agents (``agent_name: sqlagent``).

veRL's ``AgentLoopWorker`` instantiates this class per prompt row and awaits ``run``. The
loop rebuilds the :class:`~agents.types.Example` from the row, builds the configured
agent, and drives it through the project's rollout driver
(``training.rollout.run_episode_async``) with ``self.server_manager.generate`` as the
generate function, so tokenisation, stop strings, observation truncation and masks are
exactly those of the local engine. Each episode becomes one ``AgentLoopOutput``
(DualSQL gives two: linker, then generator); several outputs per row become veRL rows
keyed ``{uid}_{session}_{index}``.

Every output carries the same optional fields (veRL stacks them across a batch):
``response_logprobs`` always (the driver records sampling log-probs), ``reward_score``
always (the reward is computed here, see ``reward_adapter``), and the same
``extra_fields`` keys:

- ``sqlagent``: role, group key, per-token ``turn_index``, per-turn phases, the phase
  prefix mask for the schema track, end reason, flags;
- ``sqlagent_reward``: the full reward breakdown of this output;
- ``reward_extra_info``: flat floats veRL logs and dynamic sampling reads (``exec``);
- ``turn_scores`` / ``tool_rewards``: empty, as veRL's own loops keep them;
- ``min_global_steps`` / ``max_global_steps``: the weight versions the session's
  generation calls ran under (the server returns them; veRL's TransferQueue worker makes
  them tags and ``_compute_metrics`` reads them as ints); per turn, the episode record's
  ``turn_versions`` (``[[tokens, version], ...]``: an async trainer's update can cut a
  turn, which then goes on under the new weights, ``async_trainers.py``).

An episode whose prompt is over ``prompt_length`` is never truncated: it becomes a row
with loss mask 0 and ``dropped`` in its record (:func:`dropped_output`), so every session
of a group finishes with rows and the trainer leaves it out of group statistics.

Validation rows carry ``extra_info["sqlagent_validate"]`` (set by the trainer): the agent
then runs in inference mode where it has one (TRUST-SQL's 15-turn budget). An agent that
takes a ``few_shot_pool`` (ReToolSQL) gets the examples of veRL's training files.

``response_mask`` is the loss mask: 1 on policy tokens that train, 0 on observation
tokens and on policy tokens a guardrail masks (DualSQL's error-turn rule). veRL copies
``response_mask`` into ``loss_mask``, so the two always change together.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from training.engines.verl.shared import (
    AGENT_LOOP_NAME,
    EPISODE_KEY,
    REWARD_KEY,
    VALIDATION_MARK,
    VERSION_SEGMENTS,
    WorkerSettings,
    example_from_row,
)
from training.engines.verl.workers.reward_adapter import (
    breakdown_to_json,
    extra_info_keys,
    flat_extra_info,
    reward_function,
    score_episode,
)

if TYPE_CHECKING:
    from agents.types import Agent, Example, Trajectory

log = logging.getLogger(__name__)

__all__ = ["EPISODE_KEY", "SqlAgentLoop", "WorkerSettings", "build_agent", "example_from_row", "make_agenerate"]


@functools.lru_cache(maxsize=8)
def _cached_agent(name: str, options_json: str, validate: bool, pool_files: tuple[str, ...] | None) -> Agent:
    from agents import make_agent, runtime_options
    from training.engines.verl.shared import examples_from_parquet

    def pool() -> list[Example]:
        return [ex for path in pool_files or () for ex in examples_from_parquet(path)]

    options = runtime_options(
        name, json.loads(options_json), inference=validate, few_shot_pool=pool if pool_files else None
    )
    return make_agent(name, **options)


def build_agent(settings: WorkerSettings, validate: bool = False, pool_file: tuple[str, ...] | None = None) -> Agent:
    """The configured agent, built once per worker process (agents keep no episode state).

    As the local engine and ``eval.run`` do: validation uses the agent's inference mode
    where it has one (TRUST-SQL's 15-turn budget), and an agent that accepts a
    ``few_shot_pool`` (ReToolSQL) retrieves demonstrations from ``pool_file``'s examples.
    """
    return _cached_agent(settings.agent, json.dumps(dict(settings.agent_options), sort_keys=True), validate, pool_file)


AGenerate = Callable[[list[int], Any], Awaitable[Any]]


@dataclass
class WeightVersions:
    """The model-weight versions (veRL's ``global_steps`` of the server that answered) an
    episode's generation calls ran under. veRL's own loops copy the server's
    ``min_global_steps`` / ``max_global_steps`` onto the output; its TransferQueue worker
    turns them into tags, and ``_compute_metrics`` reads them as ints."""

    low: int | None = None
    high: int | None = None
    calls: list[list[list[Any]]] = field(default_factory=list)  # per call: [[tokens, version], ...]

    def add(self, extra_fields: Mapping[str, Any], tokens: int = 0) -> None:
        segments = extra_fields.get(VERSION_SEGMENTS)
        if segments is None:  # one answer (sync trainer): all its tokens from one version
            version = extra_fields.get("global_steps")
            segments = [[int(tokens), None if version is None else int(version)]] if tokens else []
        self.calls.append([[int(n), None if v is None else int(v)] for n, v in segments])
        for key, pick in (("min_global_steps", min), ("max_global_steps", max)):
            value = extra_fields.get(key, extra_fields.get("global_steps"))
            if value is None:
                continue
            current = self.low if key == "min_global_steps" else self.high
            value = int(value) if current is None else pick(current, int(value))
            if key == "min_global_steps":
                self.low = value
            else:
                self.high = value

    def fields(self, fallback: int) -> dict[str, int]:
        """The two fields; ``fallback`` when no call was made (a prompt dropped for length)."""
        low = self.low if self.low is not None else fallback
        high = self.high if self.high is not None else fallback
        return {"min_global_steps": int(low), "max_global_steps": int(high)}

    def per_turn(self, trajectories: Sequence[Trajectory]) -> list[list[list[list[Any]]]] | None:
        """Each trajectory's ``[[tokens, version], ...]`` per assistant turn: the session's
        calls in order, one per turn (its episodes run one after another); None when the
        counts differ (then only the session's range is known)."""
        turns = [len(t.result.turns) for t in trajectories]
        if sum(turns) != len(self.calls):
            return None
        out, start = [], 0
        for n in turns:
            out.append(self.calls[start : start + n])
            start += n
        return out


def make_agenerate(server_manager: Any, request_id: str, versions: WeightVersions | None = None) -> AGenerate:
    """The rollout driver's async generate function over veRL's LLM server client.

    One sticky ``request_id`` per episode keeps its turns on one server (prefix cache);
    veRL gives each call its own vLLM request id. ``versions`` collects the weight
    versions of the calls (the server's ``extra_fields``).
    """
    from training.rollout import GenerationOutput

    async def agenerate(prompt_ids: list[int], sampling: Any) -> GenerationOutput:
        params = vllm_sampling_params(sampling)
        output = await server_manager.generate(
            request_id=request_id, prompt_ids=list(prompt_ids), sampling_params=params
        )
        token_ids = list(output.token_ids)
        if versions is not None:
            versions.add(output.extra_fields or {}, len(token_ids))
        max_tokens = params.get("max_tokens")
        finish = "length" if max_tokens is not None and len(token_ids) >= max_tokens else "stop"
        if output.stop_reason == "aborted":  # the async client resumes aborted requests; the turn keeps its tokens
            log.warning(
                "generation aborted by the server (request %s); the turn keeps its %d tokens",
                request_id,
                len(token_ids),
            )
        logprobs = list(output.log_probs) if output.log_probs else None
        return GenerationOutput(token_ids=token_ids, logprobs=logprobs, finish_reason=finish)

    return agenerate


def vllm_sampling_params(sampling: Any) -> dict[str, Any]:
    """The driver's ``SamplingParams`` as the dict veRL's vLLM server takes.

    ``logprobs`` is always requested (veRL then records ``rollout_log_probs``); stop
    strings end a turn; ``max_tokens`` is the per-turn cap the driver computed.
    """
    params: dict[str, Any] = {
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "top_k": int(sampling.top_k) if sampling.top_k and sampling.top_k > 0 else -1,
        "logprobs": True,
        "repetition_penalty": 1.0,
    }
    if sampling.max_new_tokens is not None:
        params["max_tokens"] = int(sampling.max_new_tokens)
    if sampling.stop:
        params["stop"] = list(sampling.stop)
    return params


def episode_record(traj: Trajectory, schema_mask: Sequence[float], policy_mask: Sequence[int]) -> dict[str, Any]:
    """The per-output ``extra_fields["sqlagent"]`` record (plain JSON)."""
    result = traj.result
    return {
        "example_id": traj.example_id,
        "role": traj.role,
        "group": traj.group_id or f"{traj.example_id}:{traj.role}",
        "sample_index": int(traj.sample_index),
        "end_reason": result.end_reason,
        "num_turns": len(result.turns),
        "phases": [t.phase for t in result.turns],
        "format_ok": [bool(t.format_ok) for t in result.turns],
        "turn_index": [int(i) for i in traj.turn_index],
        "schema_mask": [int(v) for v in schema_mask],
        "policy_mask": [int(v) for v in policy_mask],
        "final_sql": result.final_sql,
        "flags": json.loads(json.dumps(result.flags, default=str)),
    }


def to_output(
    traj: Trajectory,
    breakdown: Mapping[str, Any],
    info_keys: Sequence[str],
    loss_mask: Sequence[float],
    schema_mask: Sequence[float],
    metrics: Mapping[str, float],
    response_length: int,
) -> AgentLoopOutput:
    """One trajectory as veRL's ``AgentLoopOutput`` (lengths capped at ``response_length``)."""
    n = min(len(traj.response_ids), response_length)
    logprobs = list(traj.logprobs) if traj.logprobs is not None else [0.0] * len(traj.response_ids)
    extra = {
        EPISODE_KEY: episode_record(traj, schema_mask[:n], traj.response_mask[:n]),
        REWARD_KEY: dict(breakdown),
        "reward_extra_info": flat_extra_info(breakdown, info_keys),
        "turn_scores": [],
        "tool_rewards": [],
    }
    return AgentLoopOutput(
        prompt_ids=list(traj.prompt_ids),
        response_ids=list(traj.response_ids[:n]),
        response_mask=[int(v) for v in loss_mask[:n]],
        response_logprobs=[float(v) for v in logprobs[:n]],
        reward_score=float(breakdown["total"]),
        num_turns=2 * len(traj.result.turns) + 1,  # veRL counts user + assistant + tool messages
        metrics=AgentLoopMetrics(**metrics),  # type: ignore[arg-type]  # veRL declares some timers int; they are seconds
        extra_fields=extra,
    )


_SLOTS: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = {}


def episode_slot(cap: int | None) -> contextlib.AbstractAsyncContextManager[Any]:
    """A slot among ``cap`` live episodes of this worker's event loop (no limit when None).

    veRL's agent-loop worker starts every episode of a step at once; beyond vLLM's
    sequence slots the extra requests would wait in vLLM's queue between their turns and
    evict the prefixes of the live ones. Waiting here instead keeps at most
    ``replicas x max_num_seqs`` episodes live (``training/engines/verl/checks/memory.py`` sizes ``cap``).
    """
    if not cap:
        return contextlib.nullcontext()
    loop = asyncio.get_running_loop()
    held = _SLOTS.get(id(loop))
    if held is None or held[0] is not loop:
        held = _SLOTS[id(loop)] = (loop, asyncio.Semaphore(int(cap)))
    return held[1]


@register(AGENT_LOOP_NAME)
class SqlAgentLoop(AgentLoopBase):
    """Runs the configured project agent on one prompt row; one output per episode."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # veRL's own tool registry is unused: our agents own their tools
        super().__init__(*args, **kwargs)
        self.settings = WorkerSettings.from_config(self.config)
        self.response_length = int(self.rollout_config.response_length)
        self.prompt_length = int(self.rollout_config.prompt_length)

    # several episodes -> a list, which veRL 0.9.1's v1 (TransferQueue) worker stores per episode (see below)
    async def run(  # type: ignore[override]
        self, sampling_params: dict[str, Any], **kwargs: Any
    ) -> AgentLoopOutput | list[AgentLoopOutput]:
        from tools import get_database

        extra_info = kwargs.get("extra_info")
        example = example_from_row(extra_info)
        db = get_database(example.db_path)
        validate = bool((extra_info or {}).get(VALIDATION_MARK, False))
        agent = build_agent(self.settings, validate=validate, pool_file=self._pool_file())
        request_id = f"{kwargs.get('uid', uuid4().hex)}-{kwargs.get('session_id', 0)}"
        versions = WeightVersions()
        async with episode_slot(self.settings.max_concurrent_episodes):
            trajectories, seconds = await self._rollout(agent, example, db, sampling_params, request_id, versions)
        if not trajectories:
            raise RuntimeError(f"agent {self.settings.agent!r} produced no episode for example {example.id!r}")
        # a session that made no call at all ran under the weights the sync trainer serves
        # during this step: the previous step's version
        fallback = max(0, int(kwargs.get("global_steps", 1)) - (0 if validate else 1))
        outputs = await self._outputs(trajectories, example, db, seconds, versions.fields(fallback))
        for out, turn_versions in zip(outputs, versions.per_turn(trajectories) or [], strict=False):
            out.extra_fields[EPISODE_KEY]["turn_versions"] = turn_versions
        # One episode -> one output (works with every veRL agent-loop worker); several ->
        # a list, which veRL's v1 (TransferQueue) worker stores as {uid}_{session}_{index}.
        return outputs[0] if len(outputs) == 1 else outputs

    def _pool_file(self) -> tuple[str, ...] | None:
        """The prompt parquet file(s) the few-shot pool comes from: the settings' file, else
        veRL's training files (the driver writes one example per row there)."""
        if self.settings.few_shot_pool:
            return (self.settings.few_shot_pool,)
        files = self.config.data.get("train_files")
        if not files:
            return None
        return (str(files),) if isinstance(files, str) else tuple(str(f) for f in files)

    async def _rollout(
        self,
        agent: Agent,
        example: Example,
        db: Any,
        sampling_params: Mapping[str, Any],
        request_id: str,
        versions: WeightVersions,
    ) -> tuple[list[Trajectory], float]:
        from training.rollout import run_episode_async

        loop = asyncio.get_running_loop()
        start = loop.time()
        trajectories = await run_episode_async(
            agent,
            example,
            db,
            self.tokenizer,
            make_agenerate(self.server_manager, request_id, versions),
            self.sampling(sampling_params),
            self.limits(),
        )
        return list(trajectories), loop.time() - start

    def sampling(self, sampling_params: Mapping[str, Any]) -> Any:
        """veRL's per-request sampling (train or validation values) as the driver's params."""
        from training.rollout import SamplingParams

        top_k = int(sampling_params.get("top_k", -1))
        return SamplingParams(
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_p=float(sampling_params.get("top_p", 1.0)),
            top_k=top_k if top_k > 0 else -1,
            max_new_tokens=self.settings.max_new_tokens_per_turn or self.response_length,
            logprobs=True,
        )

    def limits(self) -> Any:
        """The driver's limits: veRL's prompt/response lengths bound every episode."""
        from training.rollout import RolloutLimits

        return RolloutLimits(
            max_response_tokens=self.response_length,
            max_context_tokens=self.prompt_length + self.response_length,
            max_tokens_per_turn=self.settings.max_new_tokens_per_turn,
            max_observation_tokens=self.settings.observation_max_tokens,
            max_prompt_tokens=self.prompt_length,
        )

    async def _outputs(
        self,
        trajectories: Sequence[Trajectory],
        example: Example,
        db: Any,
        seconds: float,
        versions: Mapping[str, int],
    ) -> list[AgentLoopOutput]:
        """Score each episode, build its masks, and make one output per episode.

        An episode whose prompt exceeded ``prompt_length`` was ended before generating (flag
        ``prompt_too_long``): it is never truncated, and it becomes a placeholder row that
        trains nothing (see :func:`dropped_output`), so its group keeps its rows and veRL's
        replay buffer and validation see every session finish.
        """
        from training.algorithm.assembly import episode_masks

        kept = [t for t in trajectories if "prompt_too_long" not in t.result.flags]
        if len(kept) < len(trajectories):
            log.warning(
                "example %s: %d episode(s) dropped, prompt longer than %d tokens",
                example.id,
                len(trajectories) - len(kept),
                self.prompt_length,
            )
        keys = extra_info_keys(self.settings.filter_metric)
        outputs: dict[int, AgentLoopOutput] = {}
        if kept:
            reward_fn = reward_function(self.settings.reward, self.settings.reward_options)
            loop = asyncio.get_running_loop()
            start = loop.time()
            breakdowns = []
            for traj in kept:  # rewards execute SQL: off the event loop
                scored = await loop.run_in_executor(None, score_episode, reward_fn, traj, example, db)
                breakdowns.append(breakdown_to_json(scored))
            score_seconds = loop.time() - start
            schema = self.settings.schema_track
            masks, _ = episode_masks(kept, ["full", schema], self.settings.advantage, self.settings.error_turn_mask)
            metrics = {"generate_sequences": seconds / len(kept), "compute_score": score_seconds / len(kept)}
            for i, (traj, breakdown) in enumerate(zip(kept, breakdowns, strict=True)):
                out = to_output(
                    traj, breakdown, keys, masks["full"][i], masks[schema][i], metrics, self.response_length
                )
                outputs[id(traj)] = out
        result = []
        tokenizer: Any = self.tokenizer  # veRL types it AutoTokenizer; it is the loaded tokenizer
        for traj in trajectories:
            out = outputs.get(id(traj)) or dropped_output(traj, keys, self.prompt_length, tokenizer.eos_token_id)
            out.extra_fields.update(versions)
            result.append(out)
        return result


def dropped_output(traj: Trajectory, info_keys: Sequence[str], prompt_length: int, eos_id: int) -> AgentLoopOutput:
    """The row of an episode dropped for its prompt length: the prompt cut to
    ``prompt_length`` (it is never trained on), one end-of-sequence token with loss mask 0,
    reward 0, and ``dropped`` set in its episode record, which the trainer reads to keep the
    row out of group statistics and dynamic sampling."""
    record = episode_record(traj, [0], [0])
    record["dropped"] = True
    return AgentLoopOutput(
        prompt_ids=list(traj.prompt_ids[:prompt_length]),
        response_ids=[int(eos_id)],
        response_mask=[0],
        response_logprobs=[0.0],
        reward_score=0.0,
        num_turns=1,
        metrics=AgentLoopMetrics(),
        extra_fields={
            EPISODE_KEY: record,
            REWARD_KEY: {"total": 0.0, "components": {}, "tracks": {}, "error": None},
            "reward_extra_info": {key: 0.0 for key in info_keys},
            "turn_scores": [],
            "tool_rewards": [],
        },
    )
