"""Claude Code: environment variables only (llama-server serves Anthropic's ``/v1/messages``).

Keys (Claude Code's env-vars reference, code.claude.com/docs/en/env-vars):
``ANTHROPIC_BASE_URL`` (the gate, no ``/v1``), ``ANTHROPIC_AUTH_TOKEN`` (sent as
``Authorization: Bearer``; a placeholder when the gate checks no key),
``ANTHROPIC_MODEL`` and ``ANTHROPIC_DEFAULT_{OPUS,SONNET,HAIKU}_MODEL`` (so background
and sub-agent calls go to the same model), ``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` (the
context used for auto-compaction, capped at the model's window, which Claude Code takes
as 200,000 for a model it does not know) and ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``.
``ANTHROPIC_API_KEY`` is removed: it would be sent too, and override the token.

Compaction point (public analyses of Claude Code's ``autoCompact``, see
shared/research/tui-gate.md §C): ``window − min(max_output, 20,000) − 13,000``; with a 32k
window that leaves 11.6–15.7k tokens of conversation, so below ~64k per request Claude
Code has little room to work.
"""

from __future__ import annotations

from homelab.agents.setup import AgentSetup
from homelab.agents.target import AgentTarget

NAME = "claude"
PROGRAM = "claude"
PLACEHOLDER_TOKEN = "homelab"
"""Sent when the gate checks no key (Claude Code wants some credential to start)."""
AUTOCOMPACT_BUFFER_TOKENS = 13_000
OUTPUT_RESERVE_LIMIT = 20_000
USABLE_WINDOW = 65_536
"""Below this many tokens per request Claude Code has little room (tui-gate.md §0.9)."""


def compaction_point(window: int, max_output: int) -> int:
    """Conversation tokens at which Claude Code compacts: window − min(out, 20k) − 13k."""
    return window - min(max_output, OUTPUT_RESERVE_LIMIT) - AUTOCOMPACT_BUFFER_TOKENS


def warnings(target: AgentTarget) -> tuple[str, ...]:
    """Why the window may be too small for Claude Code."""
    window, out = target.context_tokens, target.max_output_tokens
    point = compaction_point(window, out)
    if point <= 0:
        return (
            f"Claude Code cannot work in {window:,} tokens per request: it compacts at "
            f"window − min(output {out:,}, 20,000) − 13,000 = {point:,}, i.e. at once. "
            f"Give each request more context ({target.context.remedy}).",
        )
    if window < USABLE_WINDOW:
        return (
            f"Claude Code compacts this conversation at {point:,} tokens (window {window:,} "
            f"− output {min(out, OUTPUT_RESERVE_LIMIT):,} − 13,000 buffer): below ~64k tokens "
            "per request it has little room left. Give each request more context "
            f"({target.context.remedy}).",
        )
    return ()


def setup(target: AgentTarget) -> AgentSetup:
    """Claude Code's environment for ``target``."""
    model = target.model
    env = {
        "ANTHROPIC_BASE_URL": target.base_url,
        "ANTHROPIC_AUTH_TOKEN": target.api_key or PLACEHOLDER_TOKEN,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(target.context_tokens),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(target.max_output_tokens),
    }
    return AgentSetup(
        agent=NAME,
        program=PROGRAM,
        target=target,
        env=env,
        unset=("ANTHROPIC_API_KEY",),
        warnings=warnings(target),
    )
