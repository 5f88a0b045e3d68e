"""A scripted multi-turn rollout for the driver's tests (tests/training/rollout/test_scheduler*.py).

A minimal episode protocol (tool call → observation, ``<answer>`` ends) so the driver's
token rules are tested on their own, a batched generate that replays a script by role and
turn, the checks every test applies to a trajectory, and a batched HF ``generate`` over the
tiny model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agents.base import BaseEpisode, TurnOutcome, invalid, tool_message
from agents.types import EpisodeResult, Example
from tests.helpers.tiny_model import tiny_tokenizer
from training.rollout import GenerationOutput, SamplingParams

TOK = tiny_tokenizer()
EOS = TOK.eos_token_id


class ScriptedEpisode(BaseEpisode):
    """Tool call → observation ``rows for call N``; ``<answer>`` ends; ``<<CUT>>`` makes
    the episode keep only the text before it (like DualSQL's cut after a code fence)."""

    def __init__(self, role: str, max_turns: int = 6, observation: str = "rows for call") -> None:
        messages = [
            {"role": "system", "content": f"You are the {role}."},
            {"role": "user", "content": "How many schools are in Fresno?"},
        ]
        super().__init__(role, messages, [], ("</tool_call>",), max_turns)
        self.observation = observation

    def _turn(self, text: str) -> TurnOutcome:
        if "<<CUT>>" in text:
            kept = text[: text.index("<<CUT>>")]
            self.final_sql = kept
            return TurnOutcome("answer", True, done=True, text=kept)
        if "<answer>" in text and "</answer>" in text:
            self.final_sql = text.split("<answer>", 1)[1].split("</answer>", 1)[0]
            return TurnOutcome("answer", True, done=True)
        if text.endswith("</tool_call>"):
            n = sum(1 for t in self.turns if t.phase == "tool_call")
            return TurnOutcome(
                "tool_call", True, observations=(tool_message("q", f"{self.observation} {n}"),), tool_outcome="ok"
            )
        return invalid("unreadable", tool_message("format_error", "format error"))


class ScriptedAgent:
    """One episode per role in ``roles`` (two roles behave like DualSQL)."""

    name = "scripted"

    def __init__(self, roles: Sequence[str] = ("agent",), **episode_kwargs: object) -> None:
        self.roles, self.episode_kwargs = tuple(roles), episode_kwargs

    def start(self, example: Example, db: object, previous: Sequence[EpisodeResult] = ()) -> ScriptedEpisode | None:
        if len(previous) >= len(self.roles):
            return None
        return ScriptedEpisode(self.roles[len(previous)], **self.episode_kwargs)  # type: ignore[arg-type]


TOOL = '<tool_call>{"name": "execute_sql_query", "arguments": {"db_id": "db", "sql": "SELECT 1"}}</tool_call>'
SCRIPT = {
    # each turn: (text the model generates, whether it ends with EOS)
    "agent": [
        ("<think>look</think>" + TOOL + "\nspurious text after the stop", False),  # overshoot past the stop
        ("garbled turn", True),
        ("<think>again</think>" + TOOL, False),
        ("<answer>SELECT COUNT(*) FROM schools</answer>", True),
    ],
    "linker": [("<think>x</think>" + TOOL, False), ("<answer>schools</answer>", True)],
    "generator": [("<answer>SELECT 1</answer> trailing<<CUT>>more text after the cut", True)],
}


def logprob_of(position: int, token: int) -> float:
    return -0.001 * (position + 1) - token * 1e-6


class ScriptedGenerate:
    """Batched generate that replays ``SCRIPT`` by role and turn, read from the prompt."""

    def __init__(self, script: dict = SCRIPT, tokenizer=TOK) -> None:
        self.script, self.tok, self.calls = script, tokenizer, []

    def output_for(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        text = self.tok.decode(prompt_ids)
        role = next(r for r in self.script if f"You are the {r}." in text)
        turn = text.count("<|im_start|>assistant") - 1
        body, eos = self.script[role][min(turn, len(self.script[role]) - 1)]
        ids = self.tok.encode(body, add_special_tokens=False) + ([EOS] if eos else [])
        ids = ids[: params.max_new_tokens]
        self.calls.append((role, turn, ids))
        return GenerationOutput(ids, [logprob_of(i, t) for i, t in enumerate(ids)], "stop")

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        return [self.output_for(p, params) for p in prompts]


def example(i: int = 0) -> Example:
    return Example(id=f"q{i}", db_id="db", db_path="db.sqlite", question="How many schools are in Fresno?")


def rendered(traj) -> str:
    return TOK.apply_chat_template(traj.messages, tokenize=False, add_generation_prompt=False)


def check_generated(traj, gen: ScriptedGenerate) -> None:
    """Every mask-1 token of turn t is a prefix of what generate returned for turn t."""
    outputs = {turn: ids for role, turn, ids in gen.calls if role == traj.role}
    for turn in sorted(set(traj.turn_index)):
        policy = [
            tok
            for tok, m, t in zip(traj.response_ids, traj.response_mask, traj.turn_index, strict=True)
            if t == turn and m
        ]
        assert policy == outputs[turn][: len(policy)], f"turn {turn}: mask-1 tokens not from generate"
        positions = [
            i for i, (m, t) in enumerate(zip(traj.response_mask, traj.turn_index, strict=True)) if t == turn and m
        ]
        assert positions == list(range(positions[0], positions[0] + len(positions))), (
            "policy tokens of a turn are contiguous"
        )
        assert [traj.logprobs[i] for i in positions] == [logprob_of(k, tok) for k, tok in enumerate(policy)]
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.response_mask, strict=True) if not m)


def hf_generate(model, tokenizer):
    """A batched, left-padded HF ``generate`` as a GenerateFn (sampling, log-probs)."""

    def generate(prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        width = max(map(len, prompts))
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # [batch, width]
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])  # [batch, width]
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=params.max_new_tokens,
                do_sample=True,
                temperature=params.temperature,
                top_p=params.top_p,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=pad,
                eos_token_id=tokenizer.eos_token_id,
            )
        new = out.sequences[:, width:]  # [batch, new]
        logp = torch.stack(out.scores, dim=1).log_softmax(-1)  # [batch, new, vocab]
        picked = logp.gather(-1, new[..., None])[..., 0]  # [batch, new]
        outputs = []
        for row in range(len(prompts)):
            ids = new[row].tolist()
            n = ids.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in ids else len(ids)
            outputs.append(GenerationOutput(ids[:n], picked[row, :n].tolist(), "stop" if n < len(ids) else "length"))
        return outputs

    return generate
