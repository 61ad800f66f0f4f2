"""What the app's workers and the supervisor tell the app, as past-tense messages.

Workers run in threads and only ever ``post_message`` (thread-safe, non-blocking);
the handlers run on the app's thread and update widgets.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from textual.css.query import NoMatches
from textual.message import Message

from homelab.errors import HomelabError

if TYPE_CHECKING:
    from homelab.agents.chat_stream import ChatDone
    from homelab.engine.supervision.record import EngineRecord
    from homelab.engine.supervision.states import Transition
    from homelab.gpu.report import GpuReport
    from homelab.hub.download import PullProgress
    from homelab.plan.budget import DeviceBudget
    from homelab.plan.planner import Plan
    from homelab.serve import events as ev
    from homelab.serve.set_view import SetView
    from homelab.ui.catalog import Judgement, ModelEntry
    from homelab.ui.state import Preview, Running

Handler = TypeVar("Handler", bound=Callable[..., Any])


def while_mounted(handler: Handler) -> Handler:
    """A message handler that does nothing once the widgets are gone.

    A worker's message can land while the app is shutting down (quit during a poll or
    a plan): the panels it would update no longer exist. The app's widgets are composed
    once and never removed, so a missing one means the app is closing.
    """

    @functools.wraps(handler)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except NoMatches:
            return None

    return guarded  # type: ignore[return-value]


@dataclass
class CardRead(Message, bubble=False):
    """One look at the card(s): the report and one budget per card (system RAM without one)."""

    report: GpuReport
    budgets: list[DeviceBudget]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, CardRead)


@dataclass
class CardFailed(Message, bubble=False):
    error: HomelabError


@dataclass
class ModelsListed(Message, bubble=False):
    """The menu's rows, verdicts not yet known."""

    entries: list[ModelEntry]
    asked: bool = False
    """A rescan asked for with its key (said even when nothing changed)."""


@dataclass
class ModelJudged(Message, bubble=False):
    """One row's verdict, judged with ``values`` (the row's fields then): a verdict of
    fields edited since is stale (the menu's judging pass may end after an edit's own)."""

    key: str
    judgement: Judgement
    values: dict[str, str]


@dataclass
class PlanMade(Message, bubble=False):
    key: str
    plan: Plan
    argv: list[str]
    model_path: Path | None
    measured: tuple[str, ...] = ()
    """Stored bench results of this plan's flags (lines), when there are any."""
    preview: Preview | None = None
    """The model prepared for a start (None: a preset not downloaded yet)."""


@dataclass
class PlanFailed(Message, bubble=False):
    key: str
    error: HomelabError


@dataclass
class EngineChanged(Message, bubble=False):
    """A supervisor transition (from the supervisor's thread)."""

    transition: Transition


@dataclass
class EngineStarted(Message, bubble=False):
    """A supervisor now runs (or adopted) an engine: ``running``, what the app keeps of it;
    ``planned_on``: the card report it was planned on; ``note``: what a re-plan changed
    (old vs new)."""

    running: Running
    planned_on: GpuReport | None = None
    note: str | None = None


@dataclass
class EngineStopped(Message, bubble=False):
    """The engine was stopped (``released``: left running for the next homelab)."""

    released: bool


@dataclass
class EngineFailed(Message, bubble=False):
    error: HomelabError


@dataclass
class EngineMissing(Message, bubble=False):
    """No llama-server to run (the error says where it looked and how to get one)."""

    error: HomelabError


@dataclass
class EngineBackend(Message, bubble=False):
    """What the llama-server found computes on (``CUDA (CUDA0: …)``, ``CPU only``)."""

    words: str | None


@dataclass
class EngineKept(Message, bubble=False):
    """homelab's keeper serves ``record``'s engine (None: no longer; ``said``: why)."""

    record: EngineRecord | None
    said: str | None = None


@dataclass
class EngineLookedFor(Message, bubble=False):
    """The app has looked for an engine an earlier homelab left running (adopted or not)."""


@dataclass
class AgentContract(Message, bubble=False):
    """The agent contract check's one line for the engine's URL (None: not known)."""

    words: str | None
    checked: tuple[str, str]
    """The (URL, model) it was run for: kept so the same engine is not probed again."""


@dataclass
class ServeEvent(Message, bubble=False):
    """An event of the domain's serve session that the server panel shows."""

    event: (
        ev.Actuals
        | ev.GateStarted
        | ev.GateRetargeted
        | ev.Proved
        | ev.Healing
        | ev.Healed
        | ev.PromptCacheOff
    )


@dataclass
class DownloadProgress(Message, bubble=False):
    """Bytes arriving for the picked model."""

    progress: PullProgress


@dataclass
class DownloadEnded(Message, bubble=False):
    """The download ended: ``path`` when done, ``error`` when it failed, or cancelled.

    ``fetched``: bytes came over the network (their checksum was verified); False when the
    file was already in the cache. ``kept`` of ``total`` bytes: what a cancelled download
    left on disk for the next one to resume from."""

    key: str
    path: Path | None = None
    error: HomelabError | None = None
    cancelled: bool = False
    fetched: bool = False
    kept: int | None = None
    total: int | None = None


@dataclass
class AnswerArrived(Message, bubble=False):
    """More of the chat pane's answer ``turn`` (its worker, as the text streams in)."""

    turn: int
    text: str


@dataclass
class AnswerEnded(Message, bubble=False):
    """The chat pane's answer ``turn`` ended: on its own (``done``) or with ``error``
    (text that came stays); a cancel posts none (the pane marks it at the key)."""

    turn: int
    done: ChatDone | None = None
    error: HomelabError | None = None


@dataclass
class SetRead(Message, bubble=False):
    """One look for a set of models homelab serves (None: none runs)."""

    view: SetView | None
