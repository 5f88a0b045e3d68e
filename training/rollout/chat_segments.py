"""The chat-template side of the rollout: render only the *new* part of a conversation.

Re-rendering a whole conversation through a chat template re-tokenizes it, shifts token
boundaries and silently corrupts masks, so ``ChatSegments`` renders each new segment
against a fixed reference conversation and reads the text after a marker. Observations of
role ``tool`` become role ``user`` wrapped in ``<tool_response>…</tool_response>`` when the
tokenizer's chat template cannot render ``tool`` (found by rendering a probe).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from agents.types import Message
from tools.errors import ConfigError

_SYS, _USR = "SYSTEM_PROBE_TEXT", "USER_PROBE_TEXT"
_MARK = "ASSISTANT_PROBE_MARKER_7f3a"
_TOOL_MARK = "TOOL_PROBE_MARKER_9c1e"


class ChatSegments:
    """Renders only the *new* part of a conversation through a tokenizer's chat template.

    Every delta is taken against a fixed reference conversation ending in an assistant
    turn with a marker, and read after the marker, so templates that rewrite earlier
    turns (e.g. dropping past reasoning) cannot shift the tokens already generated.
    """

    def __init__(self, tokenizer: Any, eos_token_ids: Iterable[int] | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the tokenizer has no chat_template; set tokenizer.chat_template before a rollout")
        self.tokenizer = tokenizer
        self._base = [{"role": "system", "content": _SYS}, {"role": "user", "content": _USR}]
        closed = self.render([*self._base, {"role": "assistant", "content": _MARK}], generation_prompt=False)
        if _MARK not in closed:
            raise ConfigError("the chat template does not render assistant messages' content")
        self.end_of_turn = closed[closed.rindex(_MARK) + len(_MARK) :]
        self.renders_tool_role = self._probe_tool_role()
        ids = set(eos_token_ids or ())
        if tokenizer.eos_token_id is not None:
            ids.add(int(tokenizer.eos_token_id))
        eot_ids = self.encode(self.end_of_turn)
        if eot_ids and eot_ids[0] in set(getattr(tokenizer, "all_special_ids", ())):
            ids.add(eot_ids[0])  # e.g. <|im_end|> when eos is <|endoftext|>
        self.eos_ids = frozenset(ids)
        self.end_of_turn_len = len(eot_ids)  # room every turn keeps to close itself

    def render(self, messages: Sequence[Message], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _probe_tool_role(self) -> bool:
        probe = [*self._base, {"role": "assistant", "content": _MARK}, {"role": "tool", "content": _TOOL_MARK}]
        try:
            return _TOOL_MARK in self.render(probe, generation_prompt=True)
        except Exception:  # jinja raises on roles a template refuses: that is the answer
            return False

    def template_roles(self, observations: Sequence[Message]) -> list[Message]:
        """Observations in roles the template renders (``tool`` → wrapped ``user``)."""
        if self.renders_tool_role:
            return [dict(m) for m in observations]
        out: list[Message] = []
        for message in observations:
            if message.get("role") != "tool":
                out.append(dict(message))
                continue
            wrapped = f"<tool_response>\n{message.get('content', '')}\n</tool_response>"
            if out and out[-1].get("role") == "user" and out[-1].get("_merged_tool"):
                out[-1]["content"] += "\n" + wrapped
            else:
                out.append({"role": "user", "content": wrapped, "_merged_tool": True})
        return [{k: v for k, v in m.items() if k != "_merged_tool"} for m in out]

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        return self.encode(self.render(messages, generation_prompt=True))

    def segment_text(self, messages: Sequence[Message]) -> str:
        """Template text that follows a closed assistant turn: ``messages`` + the next
        generation prompt."""
        closed = [*self._base, {"role": "assistant", "content": _MARK}]
        full = self.render([*closed, *messages], generation_prompt=True)
        # the first marker is the closed turn's: an observation may echo the marker text
        after = full[full.index(_MARK) + len(_MARK) :]
        if not after.startswith(self.end_of_turn):
            raise ConfigError(
                "the chat template renders an assistant turn differently once messages follow it; "
                "the driver cannot append observation tokens without re-tokenizing"
            )
        return after[len(self.end_of_turn) :]
