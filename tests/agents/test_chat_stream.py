"""The "try it" chat client against a real HTTP server on 127.0.0.1 that speaks
llama-server's chat SSE (tests/factory/chat_server.py): what a person reads for a normal
answer, a cut one, a refused one, a garbled one, and a cancelled one. Every failure is an
event with a title and words, never an exception."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator

import pytest

from homelab.agents.chat_errors import MAX_PROMPT_CHARS
from homelab.agents.chat_stream import (
    ChatDelta,
    ChatDone,
    ChatFailed,
    ChatSession,
    Turn,
    open_chat,
)
from homelab.engine.loopback import NotLoopbackError
from tests.factory.chat_server import MODEL, ChatServer, Reply, answer, chunk, running_chat_server
from tests.factory.server_log import free_port


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from running_chat_server()


def ask(session: ChatSession, prompt: str) -> list:
    async def collect() -> list:
        async with contextlib.aclosing(session.ask(prompt)) as events:
            return [event async for event in events]

    return asyncio.run(collect())


def text_of(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, ChatDelta))


def failure(events: list) -> ChatFailed:
    """The one failure that ends ``events`` (nothing after it, no second one)."""
    assert isinstance(events[-1], ChatFailed), events
    assert sum(isinstance(e, ChatFailed | ChatDone) for e in events) == 1, events
    return events[-1]


def test_an_answer_streams_in_and_the_next_question_carries_the_conversation(server) -> None:
    server.reply(Reply(answer("Hello", " there", usage=(21, 2))))
    server.reply(Reply(answer("Paris", usage=None)))
    session = open_chat(server.url, "sekret", temperature=0)
    assert session.model == MODEL  # asked of /v1/models, as the agent check asks it

    first = ask(session, "Say hello.")
    assert [e.text for e in first if isinstance(e, ChatDelta)] == ["Hello", " there"]
    assert first[-1] == ChatDone("stop", 21, 2, 0)
    body, headers = server.requests[0]
    assert body["stream"] is True and body["model"] == MODEL and body["temperature"] == 0
    assert body["messages"] == [{"role": "user", "content": "Say hello."}]
    assert headers["authorization"] == "Bearer sekret"

    second = ask(session, "And the capital of France?")
    assert second[-1] == ChatDone("stop", None, None, 0)  # no usage said: unknown, not 0
    assert server.requests[1][0]["messages"] == [
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": "Hello there"},
        {"role": "user", "content": "And the capital of France?"},
    ]
    assert session.history[-1] == Turn("assistant", "Paris")


def test_a_stream_that_ends_before_done_says_the_answer_was_cut(server) -> None:
    server.reply(Reply(answer("Once", " upon", done=False)[:3]))  # no finish, no [DONE]
    session = ChatSession(server.url, MODEL)
    events = ask(session, "Tell a story.")
    assert text_of(events) == "Once upon"
    error = failure(events).error
    assert error.title == "Answer cut"
    assert "before [DONE]" in error.message and "9 characters" in error.message
    # what the person saw stays in the conversation, marked cut
    assert session.history == (Turn("user", "Tell a story."), Turn("assistant", "Once upon", True))


@pytest.mark.parametrize(
    ("status", "retry", "title", "words"),
    [
        (
            429,
            "7",
            "Gate busy",
            "queue is full (HTTP 429): 64 requests wait already; try again in 7 s",
        ),
        (503, "12", "Engine busy", "(HTTP 503): no room in time; try again in 12 s"),
        (503, None, "Engine busy", "(HTTP 503): no room in time"),
        (413, None, "Question too large", "too large (HTTP 413): 9,000 tokens over 2,048"),
        (401, None, "Key refused", "refused homelab's key (HTTP 401): bad key"),
        (500, None, "Server error", "answered HTTP 500: boom"),
    ],
)
def test_an_error_status_from_the_gate_is_said_with_its_retry_after(
    server, status: int, retry: str | None, title: str, words: str
) -> None:
    said = {
        429: "64 requests wait already",
        503: "no room in time",
        413: "9,000 tokens over 2,048",
        401: "bad key",
        500: "boom",
    }[status]
    body = json.dumps({"error": {"code": status, "message": said, "type": "x"}}).encode()
    headers = {"Retry-After": retry} if retry else {}
    server.reply(Reply(status=status, headers=headers, body=body))
    session = ChatSession(server.url, MODEL)
    events = ask(session, "Hi?")
    error = failure(events).error
    assert (error.title, error.status) == (title, status)
    assert words in error.message, error.message
    assert error.retry_after_s == (int(retry) if retry else None)
    assert session.history == ()  # nothing was answered: the question is not kept


def test_a_refused_port_says_nothing_answers() -> None:
    session = ChatSession(f"http://127.0.0.1:{free_port()}", MODEL)
    error = failure(ask(session, "Anyone?")).error
    assert error.title == "Engine not answering"
    assert "nothing answers at http://127.0.0.1:" in error.message


def test_a_line_that_is_not_json_is_skipped_and_counted(server) -> None:
    lines = answer("one", " two")
    lines[2:2] = ["data: {not json\n\n", ": a comment\n\n", "event: ping\n\n", "data: [1, 2]\n\n"]
    server.reply(Reply(lines))
    events = ask(ChatSession(server.url, MODEL), "Count.")
    assert text_of(events) == "one two"
    assert events[-1] == ChatDone("stop", 12, 3, skipped_lines=2)


def test_an_error_event_inside_the_stream_ends_the_answer_with_its_words(server) -> None:
    error_line = (
        'data: {"error": {"code": 500, "message": "context shift is off", "type": "x"}}\n\n'
    )
    server.reply(Reply([chunk("Part"), error_line, *answer("never")]))
    session = ChatSession(server.url, MODEL)
    events = ask(session, "Go on.")
    error = failure(events).error
    assert error.title == "Error in the answer"
    assert "after 4 characters: context shift is off" in error.message
    assert text_of(events) == "Part"
    assert session.history[-1] == Turn("assistant", "Part", cut=True)


def test_empty_and_huge_questions_are_refused_before_sending(server) -> None:
    session = ChatSession(server.url, MODEL)
    for prompt in ("", "   \n\t"):
        assert failure(ask(session, prompt)).error.title == "Nothing to send"
    huge = "word " * (MAX_PROMPT_CHARS // 5 + 1)
    error = failure(ask(session, huge)).error
    assert error.title == "Question too long" and f"{len(huge):,} characters" in error.message
    assert server.requests == [] and session.history == ()


def test_an_answer_that_is_not_a_stream_is_said(server) -> None:
    whole = json.dumps({"choices": [{"message": {"content": "hi"}}]}).encode()
    server.reply(Reply(body=whole))
    error = failure(ask(ChatSession(server.url, MODEL), "Hi")).error
    assert error.title == "Not a stream" and "application/json" in error.message


def test_only_this_machine_is_spoken_to() -> None:
    with pytest.raises(NotLoopbackError):
        ChatSession("http://192.0.2.1:8080", MODEL)


def test_cancel_mid_answer_closes_the_stream_and_keeps_the_words_so_far(server) -> None:
    server.reply(Reply([chunk("Counting: ")], endless=True))
    session = ChatSession(server.url, MODEL)
    seen: list = []

    async def drive() -> None:
        async def consume() -> None:
            async with contextlib.aclosing(session.ask("Count forever.")) as events:
                async for event in events:
                    seen.append(event)

        task = asyncio.create_task(consume())
        while len(seen) < 3:  # bounded by the test's own timeout below
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(drive(), 60))
    # the server saw its client go (it would otherwise write words forever)
    assert server.client_gone.wait(30)
    assert all(isinstance(e, ChatDelta) for e in seen)
    kept = session.history[-1]
    assert kept.cut and kept.content.startswith("Counting: and ")
    assert kept.content == text_of(seen)


def test_a_stream_that_stops_mid_line_is_an_answer_cut(server) -> None:
    """The last line is half written when the body ends: skipped, and the answer is cut."""
    server.reply(Reply([chunk("Hal"), 'data: {"choices": [{"delta": {"content"']))
    events = ask(ChatSession(server.url, MODEL), "?")
    error = failure(events).error
    assert error.title == "Answer cut" and "before [DONE]" in error.message
    assert text_of(events) == "Hal"


def test_a_connection_that_drops_mid_body_is_an_answer_cut(server) -> None:
    """The body promised more bytes than came (an engine killed mid-answer)."""
    server.reply(Reply([chunk("Hal")], promised_bytes=10_000))
    session = ChatSession(server.url, MODEL)
    events = ask(session, "?")
    error = failure(events).error
    assert error.title == "Answer cut"
    assert "the connection broke (RemoteProtocolError), after 3 characters" in error.message
    assert text_of(events) == "Hal" and session.history[-1] == Turn("assistant", "Hal", True)
