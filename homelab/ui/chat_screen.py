"""The "try it" pane (``t``): ask the running model a question and watch the answer stream
in, through the URL the server panel shows (the gate, with its key), without leaving the app.

The conversation is :class:`~homelab.agents.chat_stream.ChatSession`'s: each question goes
with the turns before it. The answer streams on an async worker (the stream runs on the
app's loop, so a cancel closes the connection at once: the gate and llama-server stop
generating for it); the worker posts :class:`~homelab.ui.messages.AnswerArrived` and
:class:`~homelab.ui.messages.AnswerEnded`, the pane draws them. Enter sends; escape stops
an answer that is streaming (its text stays, marked cut), and otherwise closes the pane
(the conversation ends with it: ``t`` starts a new one). The pane is modal: no key of the
main screen acts while it is up, and what is typed goes to the question.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static
from textual.worker import WorkerCancelled, WorkerFailed

from homelab.errors import HomelabError
from homelab.ui.messages import AnswerArrived, AnswerEnded
from homelab.ui.widgets.keys import KeysFooter

if TYPE_CHECKING:
    from textual.worker import Worker

    from homelab.agents.chat_stream import ChatDone, ChatSession

CUT_BY_ESCAPE = "cut: stopped (escape)"
ANSWER_MAX_TOKENS = 1024
"""The longest answer a try asks for (the gate's own cap applies below it): enough to judge
the model, short enough that an answer that rambles on a CPU comes back (escape stops one
sooner)."""


class Said(Static):
    """One message of the conversation; ``text`` is what it says (the model's words are
    shown as they are: no markup)."""

    def __init__(self, who: str, text: str = "", *, classes: str) -> None:
        super().__init__(text, markup=False, classes=classes)
        self.text = text
        self.border_title = who

    def add(self, more: str) -> None:
        self.text += more
        self.update(self.text)


class ChatScreen(ModalScreen[None]):
    """See the module docstring; ``url``: the URL to ask (the gate's), ``name``: the model's
    name as the app shows it."""

    DEFAULT_CSS = """
    ChatScreen { align: center middle; }
    ChatScreen > Vertical {
        width: 90%; height: 90%; border: thick $accent; background: $surface; padding: 0 1;
    }
    ChatScreen #chat-where { color: $text-muted; height: auto; }
    ChatScreen #conversation { height: 1fr; }
    ChatScreen Said { height: auto; border: round $panel; padding: 0 1; }
    ChatScreen Said.question { border: round $primary; }
    ChatScreen Said.error { border: round $error; }
    ChatScreen #chat-input { dock: bottom; }
    """
    BINDINGS = [Binding("escape", "escape", "stop answer / close")]

    def __init__(self, url: str, name: str) -> None:
        super().__init__()
        self.url = url
        self.model_name = name
        self.session: ChatSession | None = None
        self.answers: dict[int, Said] = {}
        """Each question's answer, by its turn number."""
        self.answering: int | None = None
        """The turn whose answer streams now; None: none does."""
        self._turns = 0
        self._worker: Worker[None] | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                f"Try {self.model_name} at {self.url} (through the gate): enter sends, "
                "escape stops an answer or closes",
                id="chat-where",
                markup=False,
            )
            yield VerticalScroll(id="conversation")
            yield Input(placeholder="Ask the model… (enter sends)", id="chat-input")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#chat-input", Input).focus()

    # -- keys ------------------------------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self.answering is not None:
            self.notify("An answer is streaming: escape stops it.", title="Answering")
            return
        prompt = event.value
        if not prompt.strip():
            self.notify("Type a question first.", title="Nothing to send")
            return
        event.input.value = ""
        turn, self._turns = self._turns, self._turns + 1
        self._say(Said("you", prompt, classes="question"))
        answer = Said(self.model_name, classes="answer")
        answer.border_subtitle = "answering…"
        self.answers[turn] = answer
        self._say(answer)
        self.answering = turn
        self._worker = self.ask(turn, prompt, self._worker)

    def action_escape(self) -> None:
        """Stop the answer that streams (its text stays, marked cut); with none, close."""
        turn, worker = self.answering, self._worker
        if turn is None or worker is None:
            self.dismiss(None)
            return
        worker.cancel()  # the stream's connection closes with the task
        self.answering = None
        self.answers[turn].border_subtitle = CUT_BY_ESCAPE

    # -- the answer --------------------------------------------------------------------------

    @work(exclusive=True, group="chat", exit_on_error=False)
    async def ask(self, turn: int, prompt: str, previous: Worker[None] | None) -> None:
        """Stream the answer to ``prompt`` (the conversation opened at the first question),
        once ``previous`` (an answer stopped by escape) has put its words in the history."""
        from homelab.agents.chat_stream import ChatDelta, ChatDone

        if previous is not None:
            with contextlib.suppress(WorkerCancelled, WorkerFailed):
                await previous.wait()
        if self.session is None:
            try:
                self.session = await asyncio.to_thread(_open, self.url)
            except HomelabError as error:
                self.post_message(AnswerEnded(turn, error=error))
                return
        async with contextlib.aclosing(self.session.ask(prompt)) as events:
            async for event in events:
                if isinstance(event, ChatDelta):
                    self.post_message(AnswerArrived(turn, event.text))
                elif isinstance(event, ChatDone):
                    self.post_message(AnswerEnded(turn, done=event))
                else:
                    self.post_message(AnswerEnded(turn, error=event.error))

    def on_answer_arrived(self, message: AnswerArrived) -> None:
        self.answers[message.turn].add(message.text)
        self._follow()

    def on_answer_ended(self, message: AnswerEnded) -> None:
        answer = self.answers[message.turn]
        if self.answering == message.turn:
            self.answering = None
        if answer.border_subtitle == CUT_BY_ESCAPE:
            return  # stopped at the key: it says so already
        if message.done is not None:
            answer.border_subtitle = _ending(message.done)
        elif message.error is not None:
            error = message.error
            answer.border_subtitle = error.title if answer.text else None
            if not answer.text:
                answer.display = False  # nothing came: the error says why
            text = error.message + (f"\n{error.hint}" if error.hint else "")
            self._say(Said(error.title, text, classes="error"))
        self._follow()

    def _say(self, said: Said) -> None:
        self.query_one("#conversation", VerticalScroll).mount(said)
        self._follow()

    def _follow(self) -> None:
        self.query_one("#conversation", VerticalScroll).scroll_end(animate=False)


def _open(url: str) -> ChatSession:
    """The conversation at ``url``, with the gate's key (read as the agent check reads it)."""
    from homelab.agents.chat_stream import open_chat
    from homelab.gate.key_file import stored_key

    return open_chat(url, stored_key(), max_tokens=ANSWER_MAX_TOKENS)


def _ending(done: ChatDone) -> str:
    """``stop · 21 + 9 tokens``: why it ended and what it cost (what the server said)."""
    why = done.finish_reason or "done"
    if why == "length":
        why = "cut at the token cap"
    if done.prompt_tokens is None or done.completion_tokens is None:
        return why
    return f"{why} · {done.prompt_tokens:,} + {done.completion_tokens:,} tokens"
