"""The "try it" chat against the real llama-server serving the real SmolLM2, through a real
gate with a key (the path the TUI's pane takes): a streamed answer, the second question
with the first in its context, the gate's 413 for a conversation over its ceiling, and a
cancel that frees the engine's slot (the gate and llama-server stop generating)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from homelab.agents.chat_stream import ChatDelta, ChatDone, ChatFailed, ChatSession, open_chat
from tests.gate.conftest import busy_slots, engine, engine_counters, gate, wait_for, words

__all__ = ["engine", "gate"]  # the gate tests' fixtures: SmolLM2 on two slots, gates before it
pytestmark = pytest.mark.engine
KEY = "sk-try-it-0451"


def ask(session: ChatSession, prompt: str) -> list:
    async def collect() -> list:
        async with contextlib.aclosing(session.ask(prompt)) as events:
            return [event async for event in events]

    return asyncio.run(collect())


def test_an_answer_streams_through_the_gate_and_keeps_its_context(engine, gate) -> None:
    g = gate(engine, api_key=KEY, max_tokens_cap=24)  # short answers on a loaded 2-core box
    session = open_chat(g.url, KEY, temperature=0)
    events = ask(session, "What is the capital of France?")
    deltas = [e.text for e in events if isinstance(e, ChatDelta)]
    done = events[-1]
    assert isinstance(done, ChatDone), events
    assert len(deltas) > 1 and "".join(deltas).strip()  # streamed, piece by piece
    assert done.finish_reason in ("stop", "length")
    assert done.completion_tokens is not None and 0 < done.completion_tokens <= 24
    assert done.prompt_tokens is not None and done.prompt_tokens > 0

    second = ask(session, "Say that again.")
    assert isinstance(second[-1], ChatDone), second
    # the second question carried the first turn: its prompt is longer by that turn
    assert second[-1].prompt_tokens is not None and second[-1].prompt_tokens > done.prompt_tokens
    assert [t.role for t in session.history] == ["user", "assistant"] * 2


def test_a_conversation_over_the_gates_ceiling_is_refused_in_words(engine, gate) -> None:
    g = gate(engine, api_key=KEY)
    session = open_chat(g.url, KEY)
    events = ask(session, words(3000))  # ~3,000 tokens over a 2,048-token slot
    assert len(events) == 1 and isinstance(events[0], ChatFailed)
    error = events[0].error
    assert (error.title, error.status) == ("Question too large", 413)
    assert session.history == ()


def test_a_wrong_key_is_said(engine, gate) -> None:
    g = gate(engine, api_key=KEY)
    session = ChatSession(g.url, "any", "sk-not-it")
    [failed] = ask(session, "Hi")
    assert isinstance(failed, ChatFailed) and failed.error.title == "Key refused"


def test_cancel_mid_answer_stops_the_engine_generating(engine, gate) -> None:
    g = gate(engine, api_key=KEY)
    session = open_chat(g.url, KEY, temperature=0)
    session.max_tokens = 1500
    before = engine_counters(engine)["predicted"]
    seen: list = []

    async def drive() -> None:
        async def consume() -> None:
            async with contextlib.aclosing(session.ask("Count from 1 to 10000: 1, 2, 3,")) as ev:
                async for event in ev:
                    seen.append(event)

        task = asyncio.create_task(consume())
        while len(seen) < 3 and not task.done():
            await asyncio.sleep(0.05)
        assert not task.done(), seen  # still answering when cancelled
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(drive(), 300))
    wait_for(lambda: busy_slots(engine) == [], 120, "the engine's slot idle")
    predicted = engine_counters(engine)["predicted"] - before
    assert predicted < 1500  # it stopped long before the answer's end
    assert session.history[-1].cut and session.history[-1].content
