"""The homelab App: one main screen (card, models menu, plan, server), its keys and workers.

:func:`make_app` builds it for the command line (``homelab``, ``homelab ui``) and the
tests; :func:`run_app` runs it and makes sure no engine is left supervised by a dead app.
Blocking work (the card probe, header reads, plans, starting and stopping the engine)
runs in thread workers that post the past-tense messages of :mod:`homelab.ui.messages`;
the card follows the domain's GPU telemetry and the metrics panel the engine's status
(both in :mod:`homelab.ui.live_flow`), stopped and joined when the app unmounts. The app
is its flows (:mod:`homelab.ui.flow`); what they share is ``app.state``
(:mod:`homelab.ui.state`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import ComposeResult, ScreenStackError, SystemCommand
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import DataTable, Input
from textual.worker import Worker, WorkerState

from homelab.ui import backend
from homelab.ui.chat_flow import ChatFlow
from homelab.ui.download_flow import DownloadFlow
from homelab.ui.engine_setup_flow import EngineSetupFlow
from homelab.ui.kept_flow import KeptFlow
from homelab.ui.live_flow import LiveFlow
from homelab.ui.messages import CardFailed, CardRead, while_mounted
from homelab.ui.models_flow import ModelsFlow
from homelab.ui.offline_flow import OfflineFlow
from homelab.ui.replan_flow import ReplanFlow
from homelab.ui.server_flow import ServerFlow
from homelab.ui.set_flow import SetFlow
from homelab.ui.state import AppArgs, AppState
from homelab.ui.widgets.card import CardPanel
from homelab.ui.widgets.engine_setup import EngineSetupPanel
from homelab.ui.widgets.keys import KeysFooter, Said
from homelab.ui.widgets.metrics import MetricsPanel
from homelab.ui.widgets.models import ModelsMenu
from homelab.ui.widgets.offline import OfflineBanner
from homelab.ui.widgets.pages import FOCUS_ON, NARROW_BELOW, PAGES, PageTabs, StatusLine
from homelab.ui.widgets.plan import AUTO_CACHE, PlanPanel
from homelab.ui.widgets.server import ServerPanel

if TYPE_CHECKING:
    from homelab.plan.options import PlanOptions
    from homelab.polling import Clock

REFRESH_S = 1.0
"""How often the card is sampled (and the engine asked); 0: the card is read once."""
SAID_KEPT = 200
"""What :attr:`HomelabApp.said` keeps (the newest)."""


class HomelabApp(
    ModelsFlow,
    ReplanFlow,  # and the EngineFlow it extends
    ServerFlow,
    DownloadFlow,
    LiveFlow,
    EngineSetupFlow,
    OfflineFlow,
    ChatFlow,
    KeptFlow,
    SetFlow,
):
    """See the module docstring."""

    TITLE = "homelab"
    CSS_PATH = "homelab.tcss"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (NARROW_BELOW, "-wide")]
    BINDINGS = [
        Binding("slash", "filter", "filter"),
        Binding("s", "start", "start/switch"),
        Binding("x", "stop", "stop"),
        Binding("r", "restart", "restart"),
        Binding("R", "replan", "re-plan"),
        Binding("l", "focus_log", "log"),
        Binding("d", "download", "download"),
        Binding("m", "rescan", "rescan models"),
        Binding("z", "reset_settings", "reset settings"),
        Binding("f", "fetch_engine", "fetch engine"),
        Binding("b", "build_engine", "build engine"),
        Binding("e", "choose_engine", "use engine…"),
        Binding("f,b,e", "engine_there", show=False),  # the three above, with an engine there
        Binding("escape", "cancel_build", "cancel build", priority=True),  # while one runs
        Binding("escape", "cancel_download", "cancel download", show=False, priority=True),
        Binding("c", "copy_url", "copy URL"),
        Binding("t", "try_chat", "try it"),
        Binding("q", "quit_app", "quit"),
        Binding("ctrl+q", "quit_app", "quit", show=False, priority=True),  # asks too
        *(Binding(str(n), f"page('{page}')", page, show=False) for n, page in enumerate(PAGES, 1)),
    ]

    def __init__(self, args: AppArgs) -> None:
        super().__init__()
        self.state = AppState(args)
        self.said: deque[Said] = deque(maxlen=SAID_KEPT)
        """What the app said (the footer line's messages), oldest first."""
        self._models_init()
        self._download_init()
        self._live_init()
        self._engine_setup_init()
        self._offline_init()

    # -- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        """Two columns, or under ``NARROW_BELOW`` columns one, of pages (``homelab.tcss``)."""
        yield PageTabs(id="pages")
        yield StatusLine(id="status-line")
        with Vertical(id="left"):
            with Vertical(id="card-page"):
                yield CardPanel(id="card")
                yield EngineSetupPanel(id="engine-setup")
            with Vertical(id="engine"):
                yield MetricsPanel(id="metrics")
                yield ServerPanel(id="server")
        with Vertical(id="right"):
            yield ModelsMenu(id="menu")
            yield PlanPanel(id="plan", blink=self.state.args.blink)
        with Vertical(id="bottom"):  # docked: the banner over the keys, both as tall as they need
            yield OfflineBanner(id="offline")
            yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#models", DataTable).focus()
        self.query_one("#filter", Input).cursor_blink = self.state.args.blink
        self.call_after_refresh(self._start_work)  # the first frame first, then the imports

    def action_page(self, page: str) -> None:
        """Bring ``page`` up (the narrow layout; the tabs name the keys) and focus what it
        has to focus; at two columns every page is on screen and only the focus moves."""
        self.query_one("#pages", PageTabs).show_page(page)
        if page in FOCUS_ON:
            self.query_one(FOCUS_ON[page]).focus()

    def on_unmount(self) -> None:
        self.stop_live()  # the pollers' threads joined before the loop closes
        self.stop_download()  # a download stops at its next chunk; the partial file stays

    def _start_work(self) -> None:
        self.start_card()
        self.list_models()
        self.check_engine()
        self.start_set_watch()
        if self.state.args.adopt:
            self.state.looking = True
            self._show_engine()
            self.adopt_running(self.card_options())

    def get_system_commands(self, screen: Screen) -> Iterator[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Filter models", "Narrow the models menu (/)", self.action_filter)
        yield SystemCommand("Start or switch", "Start the picked model (s)", self.action_start)
        yield SystemCommand("Stop the engine", "Stop the running engine (x)", self.action_stop)
        yield SystemCommand(
            "Restart the engine", "Stop and start it again (r)", self.action_restart
        )
        yield SystemCommand(
            "Re-plan and restart",
            "Plan the running model on the card now, restart with it (R)",
            self.action_replan,
        )
        yield SystemCommand(
            "Build llama-server", "homelab engine build, in the app (b)", self.action_build_engine
        )
        yield SystemCommand(
            "Use a llama-server binary", "Point to one you have (e)", self.action_choose_engine
        )
        yield SystemCommand("Focus the log", "The engine's log (l)", self.action_focus_log)
        yield SystemCommand(
            "Copy the URL", "The engine's URL to the clipboard (c)", self.action_copy_url
        )
        yield SystemCommand(
            "Try the model",
            "Chat with it through the URL, in a pane (t)",
            self.action_try_chat,
        )
        yield SystemCommand(
            "Check the agents",
            "Probe the URL's routes for structured tool calls (homelab agent --check)",
            self.action_check_agents,
        )
        yield SystemCommand(
            "Quit homelab", "Ask about a running engine first (q)", self.action_quit_app
        )

    # -- saying why -------------------------------------------------------------------------

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Said in the footer line of the screen on show, drawn in the same frame as the key
        that caused it (a toast is mounted a frame or more later); a toast as well for an
        error, or for what the footer cannot show whole."""
        if threading.get_ident() != self._thread_id:  # a worker's thread: said on the loop's
            self.call_from_thread(
                self.notify, message, title=title, severity=severity, timeout=timeout
            )
            return
        said = Said(message, title, severity)
        self.said.append(said)
        try:
            footer: KeysFooter | None = self.screen.query_one(KeysFooter)
        except (NoMatches, ScreenStackError):  # a dialog: no footer line on it
            footer = None
        if footer is not None:
            footer.say(said, self.NOTIFICATION_TIMEOUT if timeout is None else timeout)
        if footer is None or severity == "error" or not footer.fits(said, self.size.width):
            super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    # -- options ---------------------------------------------------------------------------

    def card_options(self) -> PlanOptions:
        args = self.state.args
        return backend.plan_options(vram=args.vram, gpu_snapshot=args.gpu_snapshot, port=args.port)

    def plan_options(self, values: dict[str, str] | None = None) -> PlanOptions:
        """The plan request the plan panel's fields describe, or ``values`` (a row's own
        fields: its edits or the defaults); ``UsageError`` when one is bad."""
        args = self.state.args
        values = values or self.query_one("#plan", PlanPanel).values()
        return backend.plan_options(
            workload=values["workload"] or None,
            ctx=int(values["ctx"]) if values["ctx"] else None,
            slots=int(values["slots"]) if values["slots"] else None,
            cache_type=None if values["cache"] == AUTO_CACHE else values["cache"],
            vram=args.vram,
            gpu_snapshot=args.gpu_snapshot,
            port=args.port,
        )

    # -- the card --------------------------------------------------------------------------

    @while_mounted
    def on_card_read(self, message: CardRead) -> None:
        card = self.state.card
        first = card.report is None
        changed = message.report != card.report
        card.report, card.budgets = message.report, message.budgets
        if changed:  # an unchanged card is not drawn again (idle CPU)
            self._show_card()
        if self.state.running.supervisor is not None:
            self._show_engine()
        if first and self.query_one("#menu", ModelsMenu).entries:
            self.judge_models(self.query_one("#menu", ModelsMenu).entries)

    @while_mounted
    def on_card_failed(self, message: CardFailed) -> None:
        self.query_one("#card", CardPanel).show_error(message.error)

    def _show_card(self) -> None:
        card, running = self.state.card, self.state.running
        if card.report is None:
            return
        plan = running.plan or self.state.picked.plan
        planned = running.plan is None
        served = self.state.served_set
        held = served.resident_bytes() if served is not None and running.plan is None else None
        if held:  # a set of models holds the card: its residents, not the picked preview
            plan = None
        self.query_one("#card", CardPanel).show(
            card.report, card.budgets, plan, planned, held or None
        )

    # -- errors from workers ---------------------------------------------------------------

    @while_mounted
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        self.notify(
            f"{type(error).__name__}: {error}",
            title=f"Internal error in {event.worker.group}",
            severity="error",
            timeout=15,
        )


def make_app(
    *,
    gpu_snapshot: Path | None = None,
    vram: int | None = None,
    models_dirs: Iterable[Path] = (),
    port: int | None = None,
    refresh_s: float = REFRESH_S,
    blink: bool = True,
    adopt: bool = True,
    telemetry_clock: Clock | None = None,
    check_agents: bool = True,
) -> HomelabApp:
    """The app the command line runs and the tests drive (same construction for both; the
    arguments are :class:`~homelab.ui.state.AppArgs`'s)."""
    args = AppArgs(
        gpu_snapshot=gpu_snapshot,
        vram=vram,
        models_dirs=tuple(models_dirs),
        port=port,
        refresh_s=refresh_s,
        blink=blink,
        adopt=adopt,
        telemetry_clock=telemetry_clock,
        check_agents=check_agents,
    )
    return HomelabApp(args)


def run_app(
    *,
    gpu_snapshot: Path | None = None,
    vram: str | None = None,
    models_dirs: Iterable[Path] = (),
    port: int | None = None,
) -> int:
    """Run the TUI until it quits; the exit status."""
    from homelab.ui.settings import models_dirs_with

    app = make_app(
        gpu_snapshot=gpu_snapshot,
        vram=backend.parse_size(vram) if vram else None,
        models_dirs=models_dirs_with(models_dirs),
        port=port,
    )
    try:
        result = app.run()
    finally:
        app.shutdown_engine()
    if app.state.left_note:
        print(app.state.left_note)
    return int(result or 0)
