"""The "try it" pane (``t``) driven by keys: with no engine it says why and opens nothing;
with one a question streams in from the URL the app shows (here a scripted SSE server on
127.0.0.1 speaking llama-server's chat stream, the app told an engine is ready there),
escape mid-answer stops it and keeps the words, escape again closes; typing a question
fires no hotkey. The same pane against the real engine and gate is the last test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from homelab.gate.key_file import key_path
from homelab.ui.chat_screen import ANSWER_MAX_TOKENS, CUT_BY_ESCAPE, ChatScreen, Said
from tests.factory.chat_server import ChatServer, Reply, answer, chunk, running_chat_server
from tests.ui.helpers import run, wait_until
from tests.ui.test_keys import HOTKEYS, _app, _record_notes

KEY = "sk-pane-0451"


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from running_chat_server()


def _ready_at(app, url: str) -> None:
    """The app's state says an engine is ready with ``url`` in front (a stand-in session)."""
    app.state.running.supervisor = SimpleNamespace(pid=4242)
    app.state.running.session = SimpleNamespace(public_url=url, gate=None, plan=None)
    app.state.health.state = "ready"


def _store_key() -> None:
    path = key_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, f"{KEY}\n".encode())
    os.close(fd)


def _answers(app) -> list[Said]:
    return list(app.screen.query(Said).filter(".answer"))


def _errors(app) -> list[Said]:
    return list(app.screen.query(Said).filter(".error"))


async def _ask(pilot, question: str) -> None:
    app = pilot.app
    await pilot.press(*question)
    assert app.screen.query_one("#chat-input").value == question
    await pilot.press("enter")


def test_t_without_an_engine_says_why_and_opens_nothing() -> None:
    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.card.report is not None)
            notes = _record_notes(app)
            await pilot.press("t")
            assert notes == [("No chat", "No engine is running: s starts the picked model.")]
            app.state.running.supervisor = SimpleNamespace(pid=4242)
            app.state.health.state = "starting"
            await pilot.press("t")
            assert notes[-1] == (
                "No chat",
                "The engine is starting: t works once the server panel says ready.",
            )
            assert len(app.screen_stack) == 1  # nothing opened
            app.state.running.supervisor, app.state.health.state = None, None

    run(drive())


def test_a_question_streams_in_with_the_gates_key_and_the_next_carries_it(server) -> None:
    _store_key()
    server.reply(Reply(answer("Paris", " is", " the", " capital.", usage=(30, 4)), pause_s=0.05))
    server.reply(Reply(answer("Yes", usage=None)))

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.card.report is not None)
            _ready_at(app, server.url)
            await pilot.press("t")
            await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
            assert server.url in str(app.screen.query_one("#chat-where").render())
            await _ask(pilot, "Capital of France?")
            assert app.screen.query_one("#chat-input").value == ""
            await wait_until(pilot, lambda: _answers(app)[0].border_subtitle != "answering…")
            first = _answers(app)[0]
            assert first.text == "Paris is the capital."
            assert first.border_subtitle == "stop · 30 + 4 tokens"
            body, headers = server.requests[0]
            assert headers["authorization"] == f"Bearer {KEY}" and body["stream"] is True
            assert body["max_tokens"] == ANSWER_MAX_TOKENS
            await _ask(pilot, "Sure?")
            await wait_until(pilot, lambda: len(server.requests) == 2)
            await wait_until(pilot, lambda: _answers(app)[1].border_subtitle == "stop")
            assert [m["content"] for m in server.requests[1][0]["messages"]] == [
                "Capital of France?",
                "Paris is the capital.",
                "Sure?",
            ]
            app.state.running.supervisor, app.state.health.state = None, None

    run(drive())


def test_escape_mid_answer_stops_it_keeps_the_words_and_escape_again_closes(server) -> None:
    server.reply(Reply([chunk("Counting: ")], endless=True))

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.card.report is not None)
            _ready_at(app, server.url)
            await pilot.press("t")
            await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
            screen = app.screen
            await _ask(pilot, "Count forever.")
            await wait_until(pilot, lambda: _answers(app)[0].text.count("and") >= 3)
            await pilot.press("escape")
            answer = _answers(app)[0]
            assert answer.border_subtitle == CUT_BY_ESCAPE
            assert screen.answering is None and isinstance(app.screen, ChatScreen)  # still open
            await _ask(pilot, "Go on.")  # at once: it waits for the stopped answer's words
            await wait_until(pilot, lambda: len(server.requests) == 2)
            assert server.client_gone.wait(30)  # the stream's connection was closed
            await app.workers.wait_for_complete()
            await pilot.pause()
            sent = server.requests[1][0]["messages"]
            assert [m["content"] for m in sent[::2]] == ["Count forever.", "Go on."]
            assert answer.text.startswith("Counting: and ")
            assert answer.text == sent[1]["content"]  # shown = what the next question carried
            assert screen.session.history[1].cut and _answers(app)[1].text == "hi"
            await pilot.press("escape")
            await wait_until(pilot, lambda: len(app.screen_stack) == 1)
            app.state.running.supervisor, app.state.health.state = None, None

    run(drive())


def test_a_failure_is_said_in_the_pane_in_words(server) -> None:
    server.reply(
        Reply(status=429, headers={"Retry-After": "5"}, body=b'{"error": {"message": "full"}}')
    )
    server.reply(Reply(answer("Half", done=False)[:2]))

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.card.report is not None)
            _ready_at(app, server.url)
            await pilot.press("t")
            await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
            await _ask(pilot, "Hi?")
            await wait_until(pilot, lambda: len(_errors(app)) == 1)
            busy = _errors(app)[0]
            assert busy.border_title == "Gate busy" and "try again in 5 s" in busy.text
            assert not _answers(app)[0].display  # no words came: only the error shows
            await _ask(pilot, "Again?")
            await wait_until(pilot, lambda: len(_errors(app)) == 2)
            assert _errors(app)[1].border_title == "Answer cut"
            assert (
                _answers(app)[1].text == "Half" and _answers(app)[1].border_subtitle == "Answer cut"
            )
            app.state.running.supervisor, app.state.health.state = None, None

    run(drive())


def test_typing_a_question_fires_no_hotkey(server) -> None:
    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.card.report is not None)
            _ready_at(app, server.url)
            await pilot.press("t")
            await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
            notes = _record_notes(app)
            await pilot.press(*HOTKEYS, "t", "4", "2")
            assert app.screen.query_one("#chat-input").value == "sxrRldfbecqt/t42"
            assert notes == [] and isinstance(app.screen, ChatScreen) and app.is_running
            assert app.state.health.state == "ready"  # x did not ask to stop, q did not quit
            app.screen.query_one("#conversation").focus()  # off the field: still nothing
            await pilot.press("x", "q", "s")
            assert notes == [] and isinstance(app.screen, ChatScreen)
            app.state.running.supervisor, app.state.health.state = None, None

    run(drive())


@pytest.mark.engine
def test_the_pane_chats_with_the_real_engine_through_its_gate(models_dir, engine_pids) -> None:
    from tests.factory.server_log import free_port
    from tests.ui.test_engine_flows import _app as _engine_app
    from tests.ui.test_engine_flows import (
        _pick_small_plan,
        _quit_stopping_the_engine,
        _start_and_wait_ready,
    )

    async def drive() -> None:
        app = _engine_app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            url = await _start_and_wait_ready(app, pilot, engine_pids)  # the gate's
            await pilot.press("t")
            await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
            await _ask(pilot, "What is the capital of France?")
            await wait_until(
                pilot, lambda: _answers(app)[0].border_subtitle != "answering…", timeout=300
            )
            answer = _answers(app)[0]
            assert _errors(app) == [] and answer.text.strip()
            assert answer.border_subtitle.endswith("tokens")  # the server's own count
            assert app.screen.session.base_url == url
            await pilot.press("escape")
            await wait_until(pilot, lambda: len(app.screen_stack) == 1)
            await _quit_stopping_the_engine(app, pilot)

    run(drive())
