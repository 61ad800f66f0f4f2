"""Workloads: how many tokens one conversation (one llama-server slot) must hold.

An agent's every request carries about 100,000 tokens (a coding agent resends the
whole conversation each turn); a chat stays within a few thousand; a FIM request (an
editor's autocomplete: the code before and after the cursor) a few thousand at most. A
number means exactly that many tokens per slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.errors import UsageError

AGENT_TOKENS = 100_000
CHAT_TOKENS = 8_192
"""A chat request averages ~2.5k tokens; a slot holds the conversation's history too."""
FIM_TOKENS = 4_096
"""An autocomplete request sends a window of the file around the cursor (Continue's default
prompt budget is about 2k tokens of prefix and suffix); 4,096 is also the smallest context
the planner serves (:data:`~homelab.plan.choose.MIN_CTX`)."""


@dataclass(frozen=True, slots=True)
class Workload:
    """What each slot is for and how many tokens it must hold."""

    name: str
    tokens_per_slot: int

    def describe(self) -> str:
        return f"{self.name} ({self.tokens_per_slot:,} tokens per conversation)"


AGENT = Workload("agent", AGENT_TOKENS)
CHAT = Workload("chat", CHAT_TOKENS)
FIM = Workload("fim", FIM_TOKENS)
NAMED = {"agent": AGENT, "chat": CHAT, "fim": FIM, "autocomplete": FIM}
"""The workloads by name (``autocomplete`` is FIM's other name)."""


def parse_workload(text: str) -> Workload:
    """``"agent"``, ``"chat"``, ``"fim"`` (``"autocomplete"``) or a token count like
    ``"32768"`` / ``"32k"``.

    Raises:
        UsageError: the text is none of those, or a count below 256 tokens.
    """
    value = text.strip().lower()
    if value in NAMED:
        return NAMED[value]
    multiplier = 1
    if value.endswith("k"):
        value, multiplier = value[:-1], 1000
    if not (value.isascii() and value.isdigit()) or len(value) > 12:
        raise UsageError(
            f"unknown workload {text!r}",
            hint="Use agent (~100k tokens per conversation), chat (~8k), fim (~4k, autocomplete) "
            "or a token count like 32768.",
        )
    tokens = int(value) * multiplier
    if tokens < 256:
        raise UsageError(
            f"a workload of {tokens} tokens is too small (llama.cpp pads slots to 256)"
        )
    return Workload(f"{tokens:,} tokens", tokens)
