"""The app as each of its flows sees it: Textual's App, the shared state, and the few
calls one flow makes into another.

Every flow (``homelab/ui/*_flow.py``) subclasses :class:`AppFlow`; the app
(:class:`homelab.ui.app.HomelabApp`) is all of them at once. A flow keeps what only it
uses as its own typed attributes, shares the rest through :attr:`AppFlow.state`, and
reaches another flow only through the methods declared here (each defined once, where
its comment says).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.app import App
from textual.message import Message

from homelab.ui.state import AppState

if TYPE_CHECKING:
    from textual.worker import Worker

    from homelab.plan.options import PlanOptions
    from homelab.ui.catalog import ModelEntry
    from homelab.ui.state import Picked
    from homelab.ui.widgets.server import ServerPanel


class AppFlow(App[int]):
    """See the module docstring."""

    state: AppState
    hub_offline: str | None
    """Why the Hub cannot be reached now, or None (kept by OfflineFlow)."""

    def post_from_thread(self, message: Message) -> None:
        """Post from a worker's or a poller's thread; an app whose loop already closed (quit
        under way) just drops it."""
        try:
            self.post_message(message)
        except RuntimeError:
            pass

    # HomelabApp: the plan requests, the card panel drawn
    @abstractmethod
    def card_options(self) -> PlanOptions: ...
    @abstractmethod
    def plan_options(self, values: dict[str, str] | None = None) -> PlanOptions: ...
    @abstractmethod
    def _show_card(self) -> None: ...

    # ServerFlow: the server panel drawn, the engine checked; OfflineFlow: how a Hub call
    # went (any thread); ModelsFlow: plan a row on a worker, list the models again
    @abstractmethod
    def _show_engine(self) -> None: ...
    @abstractmethod
    def check_engine(self) -> Worker[None]: ...
    @abstractmethod
    def hub_seen(self, reason: str | None) -> None: ...
    @abstractmethod
    def plan_picked(self, entry: ModelEntry) -> Worker[None]: ...
    @abstractmethod
    def list_models(self, asked: bool = False) -> Worker[None]: ...

    # KeptFlow: an engine homelab's keeper serves (shown, stopped, replaced after a yes)
    @abstractmethod
    def show_kept(self, panel: ServerPanel) -> bool: ...
    @abstractmethod
    def start_over_kept(self, entry: ModelEntry, picked: Picked, start: Callable) -> bool: ...
    @abstractmethod
    def stop_kept(self) -> bool: ...
