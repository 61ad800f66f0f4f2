"""What the app's workers and the supervisor tell the app, as past-tense messages.

Workers run in threads and only ever ``post_message`` (thread-safe, non-blocking);
the handlers run on the app's thread and update widgets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from homelab.errors import HomelabError


@dataclass
class CardRead(Message, bubble=False):
    """One look at the card(s): the report and one budget per card (system RAM without one)."""

    report: Any
    budgets: list

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, CardRead)


@dataclass
class CardFailed(Message, bubble=False):
    error: HomelabError


@dataclass
class ModelsListed(Message, bubble=False):
    """The menu's rows (``catalog.ModelEntry``), verdicts not yet known."""

    entries: list


@dataclass
class ModelJudged(Message, bubble=False):
    """One row's verdict (``catalog.Judgement``)."""

    key: str
    judgement: Any


@dataclass
class PlanMade(Message, bubble=False):
    key: str
    plan: Any
    argv: list[str]
    model_path: Any


@dataclass
class PlanFailed(Message, bubble=False):
    key: str
    error: HomelabError


@dataclass
class EngineChanged(Message, bubble=False):
    """A supervisor transition (from the supervisor's thread)."""

    transition: Any


@dataclass
class EngineStarted(Message, bubble=False):
    """A supervisor now runs (or adopted) an engine for ``key``."""

    key: str
    supervisor: Any


@dataclass
class EngineStopped(Message, bubble=False):
    """The engine was stopped (``released``: left running for the next homelab)."""

    released: bool


@dataclass
class EngineFailed(Message, bubble=False):
    error: HomelabError
